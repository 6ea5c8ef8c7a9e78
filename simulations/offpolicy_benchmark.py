"""Off-policy federated RL (issue 17): federated vs local-only vs centralized DQN and SAC, over seeds.

    python simulations/offpolicy_benchmark.py                       # 4 tasks x 3 kinds x 3 seeds
    python simulations/offpolicy_benchmark.py --only sac-pendulum --seeds 1

Tasks (8 nodes each): DQN on heterogeneous CartPole (pole length, cart mass) within 49,152 env
steps per node, and on heterogeneous Acrobot (link masses, as in Jin et al., AISTATS 2022); SAC on
heterogeneous Pendulum (gravity 8-12, mass 0.8-1.2) within 20,480 env steps per node, and on
MountainCarContinuous (engine power varying, 20,480 env steps per node, with pink exploration
noise: white noise never finds the goal). The federation averages plainly (``strategy.server-lr
= 1``: QAvg for DQN, Jin et al.); on CartPole seed 2 it solved where the default annealed step
(2 to 0.5) reached 452. Kinds: ``federated`` (``fedrl run``, Flower's Simulation Engine, 2
SuperNodes of one CPU each), ``local`` (``strategy.name = local``: each node
alone, same budget) and ``central`` (``fedrl central``: one learner on the pooled envs, the same
env steps, replay capacity and gradient steps). Runs are interleaved (seed 0: federated, local,
central; seed 1: ...) because this machine's speed drifts.

Per task and kind, over seeds (median, and min..max): the final and the best model's return on
the worst variant (the best by fedrl's own choice, best_model.npz), the worst variant's return
averaged over the run's evaluations (the area under its learning curve), env steps per node until
every variant first reached the target (``-`` if never), and wall seconds. Targets: DQN solves
every CartPole variant (>= 475), SAC brings every Pendulum variant to >= -250, and on every
task the federation beats local-only training on the worst variant. Pendulum returns depend on
the start state, so its variants are evaluated on 10 episodes each.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

from benchmark import BIN, REPO, Flower, _join

from fedrl.runfolder.compare import spread

SUITES: dict[str, str] = {
    "dqn-cartpole": "algo.name='dqn' env.id='CartPole-v1' env.vary='length=linspace(0.4, 1.2); "
                    "masscart=uniform(0.5, 2.0)' algo.local-steps=2048 num-server-rounds=24 eval.every=4 "
                    "eval.episodes=5 strategy.server-lr=1.0 strategy.server-lr-end=-1",
    "dqn-acrobot": "algo.name='dqn' env.id='Acrobot-v1' env.vary='link_mass_1=uniform(0.7, 1.3); "
                   "link_mass_2=uniform(0.7, 1.3)' algo.local-steps=2048 num-server-rounds=24 eval.every=4 "
                   "eval.episodes=5 strategy.server-lr=1.0 strategy.server-lr-end=-1",
    "sac-pendulum": "algo.name='sac' env.id='Pendulum-v1' env.vary='g=linspace(8, 12); m=uniform(0.8, 1.2)' "
                    "algo.local-steps=1024 num-server-rounds=20 eval.every=2 eval.episodes=10 "
                    "eval.target-return='-250' strategy.server-lr=1.0 strategy.server-lr-end=-1",
    "sac-mountaincar": "algo.name='sac' env.id='MountainCarContinuous-v0' env.vary='power=uniform(0.0012, 0.0018)' "
                       "sac.noise-color=1.0 algo.local-steps=1024 num-server-rounds=20 eval.every=2 "
                       "eval.episodes=5 strategy.server-lr=1.0 strategy.server-lr-end=-1",
}
KINDS = ("federated", "local", "central")
COMMON = "nodes.count=8 nodes.wait-s=300"


def run_one(suite: str, kind: str, seed: int, out: Path, flower: Flower) -> dict:
    name = f"{suite}-{kind}-{seed}"
    shutil.rmtree(out / name, ignore_errors=True)
    rc = _join(COMMON, SUITES[suite], f"seed={seed} output-dir='{out}' run-name='{name}'",
               "strategy.name='local'" if kind == "local" else "")
    if kind == "central":
        cmd = [str(BIN / "fedrl"), "central", str(REPO), "--run-config", rc]
    else:
        cmd = [str(BIN / "fedrl"), "run", str(REPO), "--run-config", rc, "--federation-config",
               "num-supernodes=2 client-resources-num-cpus=1"]
    t0 = time.time()
    res = subprocess.run(cmd, env=flower.env, capture_output=True, text=True, cwd=REPO, check=False)
    folder = out / name
    if res.returncode != 0 or not (folder / "summary.json").exists():
        raise RuntimeError(f"{name} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return {**result_of(folder, suite, kind, seed), "wall_s": time.time() - t0}


def result_of(folder: Path, suite: str, kind: str, seed: int) -> dict:
    """One finished run's row of the table, from its folder (``wall_s``: the run's own wall time)."""
    summary = json.loads((folder / "summary.json").read_text())
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    target = summary["target_return"]
    nodes = int(json.loads((folder / "config.json").read_text())["run_config"]["nodes.count"])
    curve = [r for r in rows if r.get("eval_min_return") is not None]  # the evaluated rounds
    hit = next((r for r in curve if target is not None and r["eval_min_return"] >= target), None)
    return {"suite": suite, "kind": kind, "seed": seed, "final_min": summary["eval_min_return"],
            "best_min": summary.get("best_eval_min_return"), "auc_min": sum(r["eval_min_return"] for r in curve) / len(curve), "target": target,
            "steps_per_node_to_target": hit["env_steps"] / nodes if hit else None,
            "wall_s": summary.get("wall_time_s")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--only", choices=list(SUITES), action="append")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of " + ", ".join(KINDS))
    ap.add_argument("--out", type=Path, default=REPO / "simulations" / "results-offpolicy")
    ap.add_argument("--report", action="store_true",
                    help="run nothing: print the table of the runs already in --out (from any invocation)")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if unknown := set(kinds) - set(KINDS):
        ap.error(f"--kinds: unknown {sorted(unknown)}; allowed: {', '.join(KINDS)}")
    if args.report:
        done = [result_of(args.out / f"{suite}-{kind}-{seed}", suite, kind, seed)
                for suite in args.only or list(SUITES) for seed in range(args.seeds) for kind in kinds
                if (args.out / f"{suite}-{kind}-{seed}" / "summary.json").exists()]
        report(done, args.only or list(SUITES), kinds)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    flower = Flower(args.out / ".flwr-home")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    results: list[dict] = []
    try:
        for suite in args.only or list(SUITES):
            for seed in range(args.seeds):
                for kind in kinds:  # interleaved
                    r = run_one(suite, kind, seed, args.out, flower)
                    results.append(r)
                    print(f"[{suite} seed {seed}] {kind:<9} final worst {r['final_min']:.1f}, best worst "
                          f"{r['best_min']}, target reached after {r['steps_per_node_to_target']} steps/node, "
                          f"{r['wall_s']:.0f} s", flush=True)
                    (args.out / "offpolicy.json").write_text(json.dumps(results, indent=1))
    finally:
        flower.stop()
    report(results, args.only or list(SUITES), kinds)
    return 0


def report(results: list[dict], suites: list[str], kinds: list[str]) -> None:
    print(f"\n{'task/kind':<28}{'final, worst variant':>30}{'best, worst variant':>30}{'mean over evals, worst':>30}"
          f"{'steps/node to target':>34}{'wall s':>18}")
    for suite in suites:
        for kind in kinds:
            rs = [r for r in results if r["suite"] == suite and r["kind"] == kind]
            print(f"{suite + '/' + kind:<28}{spread([r['final_min'] for r in rs]):>30}"
                  f"{spread([r['best_min'] for r in rs]):>30}"
                  f"{spread([r['auc_min'] for r in rs]):>30}"
                  f"{spread([r['steps_per_node_to_target'] for r in rs], ',.0f'):>34}"
                  f"{spread([r['wall_s'] for r in rs], '.0f'):>18}")
    print("\nfederated - local on the worst variant, per seed (> 0: the federation is better); final and best "
          "model, and the mean over evaluations (the area under the learning curve: how soon it learned):")
    for suite in suites:
        for key in ("final_min", "best_min", "auc_min"):
            fed = {r["seed"]: r[key] for r in results if r["suite"] == suite and r["kind"] == "federated"}
            loc = {r["seed"]: r[key] for r in results if r["suite"] == suite and r["kind"] == "local"}
            diffs = [fed[s] - loc[s] for s in sorted(fed) if s in loc]
            if diffs:
                print(f"  {suite} {key.split('_')[0]:<5}: {' '.join(f'{d:+.1f}' for d in diffs)}")


if __name__ == "__main__":
    raise SystemExit(main())
