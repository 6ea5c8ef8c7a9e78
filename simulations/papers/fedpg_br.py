"""FedPG-BR (Fan et al., NeurIPS 2021), Fig. 1, CartPole panel: K = 1, 3 and 10 agents, no faulty
agent. fedrl's federation on the paper's environment and x-axis, beside the paper's curves.

    python simulations/papers/fedpg_br.py [--seeds 5] [--seed-base 0] [--out DIR]

The paper's setting, as its code has it (github.com/flint-xf-fan/Byzantine-Federated-RL,
``codes/options.py``): plain ``CartPole-v1`` (every agent the same environment, episodes of at most
500 steps), a 16-16 policy, discount 0.999, a budget of 5,000 trajectories per agent, greedy
evaluation of 10 episodes after each round, 10 seeds. The x-axis counts trajectories per agent
(the code adds ``(B K + b N) / (K + 1)`` a round: the server, which samples its own
variance-reduction batches, counts as one more agent).

What fedrl runs: ``fedrl run`` in Flower's Simulation Engine with K nodes on that environment,
the same policy width, discount and evaluation, and fedrl's own algorithm (PPO with FedAvg,
defaults otherwise); a round is 1,024 env steps per node. FedPG-BR's algorithm is not fedrl's:
its server samples trajectories itself to take SVRPG steps, which no fedrl server does (a
fedrl server never runs an environment). So the comparison is of the claim the figure makes —
more agents reach the target in fewer trajectories each — and of the trajectory counts, not of
one estimator against another. Our x-axis: trajectories per agent from each node's round
(env steps over its mean training return: exact for completed CartPole episodes).

Printed per K, over seeds: runs whose evaluation reaches 475; median trajectories per agent to
the first evaluation at 475 (how one reads the paper's curves; a greedy CartPole policy can touch
500 once and fall back) and to the evaluation from which every later one stays at 475 (min-max);
the median return after 500 trajectories per agent, or at the run's end where it ends sooner
(60 rounds; once CartPole is balanced a round of 1,024 steps is 2 trajectories, so a run that
solves early ends short of 500); beside them the paper's values read off its Fig. 1
(approximate, about 5% of the axis). Runs are seed-major (K = 1, 3, 10 for seed 0, then for
seed 1, ...), because this machine's speed drifts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runs import Flower, at, first_at, fmt, held_from, median_or_none, run

TARGET = 475.0
BUDGET = 5000  # trajectories per agent (the paper's x-axis)
AGENTS = (1, 3, 10)
# Read off Fig. 1's CartPole panel (exp1.jpg in the authors' repository): first trajectory count
# at about 475-500, and the return at 500 and 1,000 trajectories.
PAPER = {
    1: {"first": "~4,500+", "at500": "~55"},
    3: {"first": "~900-1,000", "at500": "~320"},
    10: {"first": "~700-800", "at500": "~430"},
}
# The paper's environment, width, discount and evaluation; fedrl's algorithm; 60 rounds of 1,024
# env steps per agent (61k steps; the paper's 5,000 trajectories would be up to 2.5M once solved).
SETTING = ("env.id='CartPole-v1' env.vary='' algo.hidden='16,16' ppo.gamma=0.999 "
           "algo.local-steps=1024 num-server-rounds=60 eval.every=1 eval.episodes=10 "
           "eval.target-return=475 min-train-nodes=1")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed-base", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results-papers" / "fedpg_br")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    flower = Flower(args.out / ".flwr-home")
    results: dict[int, list[tuple[float | None, float | None, float | None]]] = {k: [] for k in AGENTS}
    ends: dict[int, list[float]] = {k: [] for k in AGENTS}
    try:
        for seed in range(args.seed_base, args.seed_base + args.seeds):
            for k in AGENTS:
                r = run(flower, args.out, f"k{k}-s{seed}", f"{SETTING} nodes.count={k} seed={seed}",
                        supernodes=min(k, 2))
                ev = [e for e in r.evals() if e[0] <= BUDGET]
                hit, kept = first_at(ev, TARGET), held_from(ev, TARGET)
                results[k].append((hit, kept, at(ev, 500)))
                ends[k].append(ev[-1][0])
                print(f"K={k:<3} seed {seed}: first >= {TARGET:.0f} at {fmt(hit)} trajectories/agent, held from "
                      f"{fmt(kept)}, return at 500 (or end, {ev[-1][0]:.0f}) {fmt(at(ev, 500))} ({r.seconds:.0f} s)",
                      flush=True)
    finally:
        flower.stop()
    print(f"\nFedPG-BR Fig. 1 (CartPole-v1), seeds {args.seed_base}..{args.seed_base + args.seeds - 1}; "
          "fedrl: PPO + FedAvg through Flower's Simulation Engine; paper: FedPG-BR, read off the figure")
    print(f"{'K':>3} {'solved':>7} {'first at 475':>20} {'paper':>12} {'held from [runs]':>26} "
          f"{'return @500 or end':>19} {'paper @500':>11}")

    def span(xs: list[float | None]) -> str:
        got = [x for x in xs if x is not None]
        return f"{fmt(median_or_none(got))} ({fmt(min(got))}-{fmt(max(got))})" if got else "-"

    for k in AGENTS:
        rs = results[k]
        n_hit = sum(h is not None for h, _, _ in rs)
        end = f"{fmt(median_or_none([a for _, _, a in rs]))} ({fmt(median_or_none(list(ends[k])))} tr.)"
        print(f"{k:>3} {f'{n_hit}/{len(rs)}':>7} {span([h for h, _, _ in rs]):>20} {PAPER[k]['first']:>12} "
              f"{span([h for _, h, _ in rs]) + f' [{sum(h is not None for _, h, _ in rs)}/{len(rs)}]':>26} "
              f"{end:>19} {PAPER[k]['at500']:>11}")
    base = median_or_none([h for _, h, _ in results[1]])
    if base:
        ratios = {k: base / m for k in AGENTS[1:] if (m := median_or_none([h for _, h, _ in results[k]]))}
        print("speed-up over K=1 in trajectories per agent until 475 holds (median): "
              + ", ".join(f"K={k}: {v:.1f}x" for k, v in ratios.items())
              + "  (paper, first reach: K=3 ~4.5x, K=10 ~6x)")
    print("Trajectories are per agent. 'held from': the first evaluation after which every evaluation stays >= 475.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
