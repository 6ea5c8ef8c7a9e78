"""Scale: the per-node path against cohorts on heterogeneous CartPole (issue 16).

Each case is one ``fedrl run`` through Flower's Simulation Engine (2 SuperNodes)
with ``nodes.cohort-size = 1`` (every logical node its own message and its own training) and
with cohorts (a SuperNode's selected nodes in one message, trained in one vectorized pass).
Runs are interleaved (per node, cohort, per node, cohort, ...) because this machine's speed
drifts; the table gives medians and the cohort/per-node ratios. Measured per run: env steps per
second over the training rounds (the last round, which also evaluates every variant, is left
out), median seconds per round, and the peak resident memory of every process of the run
(SuperLink, SuperExec, Ray workers), sampled every 0.2 s. A CleanRL-style single PPO learner
(one node's ``train_locally`` on Gymnasium's own vector env, in this process) gives the
yardstick of env steps per second on this machine. The compute ceiling: a cohort of 50 nodes
trained in this process on one thread (``Algorithm.train_cohort``: no Flower, no Ray, no server
and no evaluation), times the CPUs the SuperNodes run on; no end-to-end run can pass it.

    python simulations/scale_benchmark.py                      # 8, 100 and 1,000 nodes, 1 repetition
    python simulations/scale_benchmark.py --scales 8,100 --reps 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmark import BIN, REPO, Flower, _join

# name -> (run config, the cohort size of the cohort path); CartPole pole lengths and cart masses vary.
SCALES = {
    "8": ("nodes.count=8", 8),
    "100": ("nodes.count=100", 50),
    "1000": ("nodes.count=1000 fraction-train=0.1", 100),
}
VARY = "length=uniform(0.3, 1.5); masscart=uniform(0.5, 2.0)"
COMMON = f"env.vary='{VARY}' algo.local-steps=1024 eval.every=0 eval.episodes=1 nodes.wait-s=300"


def _rss_of_run(home: str) -> int:
    """Resident bytes of every process whose environment carries this run's FLWR_HOME."""
    total = 0
    needle = f"FLWR_HOME={home}".encode()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if needle not in (p / "environ").read_bytes():
                continue
            for line in (p / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def run_one(scale: str, path: str, rounds: int, rep: int, out: Path, flower: Flower, cpus: int = 1) -> dict:
    base, cohort = SCALES[scale]
    name = f"n{scale}-{path}-{rep}"
    size = cohort if path == "cohort" else 1
    rc = _join(COMMON, base, f"num-server-rounds={rounds} seed={rep} nodes.cohort-size={size} "
                             f"output-dir='{out}' run-name='{name}'")
    cmd = [str(BIN / "fedrl"), "run", str(REPO), "--run-config", rc, "--federation-config",
           f"num-supernodes=2 client-resources-num-cpus={cpus}"]
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_of_run(flower.env["FLWR_HOME"]))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.time()
    res = subprocess.run(cmd, env=flower.env, capture_output=True, text=True, cwd=REPO, check=False)
    done.set()
    sampler.join()
    folder = out / name
    if res.returncode != 0 or not (folder / "summary.json").exists():
        raise RuntimeError(f"{name} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    train = rows[:-1] or rows  # the last round also evaluates every variant
    steps = sum(r["env_steps"] - (rows[i - 1]["env_steps"] if i else 0) for i, r in enumerate(rows) if r in train)
    return {"scale": scale, "path": path, "rep": rep, "steps_per_s": steps / sum(r["round_time_s"] for r in train),
            "s_per_round": statistics.median(r["round_time_s"] for r in train), "peak_rss_gb": peak / 2**30,
            "command_s": time.time() - t0}


def cleanrl_steps_per_s(rounds: int = 6) -> float:
    """One PPO learner (default settings: 8 envs, 1,024 steps a round) on Gymnasium's own vector env."""
    import gymnasium as gym
    import torch

    from fedrl.config import from_run_config
    from fedrl.envs.make import make_vector_env
    from fedrl.rl.networks import ActorCritic, get_weights, spec_for
    from fedrl.rl.train import train_locally
    from fedrl.wire import LocalPlan, NodeState

    torch.set_num_threads(1)
    cfg = from_run_config({"num-server-rounds": rounds})
    probe = gym.make("CartPole-v1")
    spec = spec_for(probe.observation_space, probe.action_space, cfg.algo.hidden_sizes)
    weights, state, steps = get_weights(ActorCritic(spec)), NodeState.empty(), 0
    t0 = time.perf_counter()
    for rnd in range(1, rounds + 1):
        envs = make_vector_env("CartPole-v1", [{}] * cfg.algo.num_envs, {})
        res = train_locally(spec, weights, envs, cfg, LocalPlan(0, rnd, rounds, 0, 0.0, None), state)
        envs.close()
        weights, state, steps = res.weights, res.state, steps + res.env_steps
    return steps / (time.perf_counter() - t0)


def cohort_ceiling_steps_per_s(k: int = 50, rounds: int = 4) -> float:
    """One thread training a cohort of ``k`` heterogeneous CartPole nodes in this process, as one
    SuperNode of the 1,000-node case does in a round (default PPO, ``algo.local-steps = 1024``)."""
    import torch

    from fedrl.algorithms.base import CohortMember
    from fedrl.config import from_run_config
    from fedrl.envs.spec import parse_vary, sample_variant
    from fedrl.experiment import initial_weights, policy_spec
    from fedrl.registry.algorithms import get as algorithm
    from fedrl.wire import LocalPlan, NodeState

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = from_run_config({"env.vary": VARY, "nodes.count": k, "algo.local-steps": 1024,
                               "num-server-rounds": rounds})
        variants = [sample_variant(parse_vary(cfg.env.vary), i, k, cfg.seed) for i in range(k)]
        spec = policy_spec(cfg, variants[0])
        weights = [initial_weights(spec, cfg.seed)] * k
        states = [NodeState.empty()] * k
        steps = 0
        t0 = time.perf_counter()
        for rnd in range(1, rounds + 1):
            members = [CohortMember(weights[i], LocalPlan(i, rnd, rounds, cfg.seed, 0.0, None), states[i],
                                    variants[i]) for i in range(k)]
            res = algorithm("ppo").train_cohort(cfg, spec, members, {})
            weights, states = [r.weights for r in res], [r.state for r in res]
            steps += sum(r.env_steps for r in res)
        return steps / (time.perf_counter() - t0)
    finally:
        torch.set_num_threads(before)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", default="8,100,1000", help="comma-separated: 8, 100, 1000")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5, help="rounds per run (the last one evaluates)")
    ap.add_argument("--paths", default="per-node,cohort", help="comma-separated: per-node, cohort")
    ap.add_argument("--cpus", type=int, default=1, help="Ray CPUs per simulated SuperNode (Flower's default is 2, "
                                                          "which runs the 2 SuperNodes one after the other here)")
    ap.add_argument("--out", type=Path, default=REPO / "simulations" / "results-scale")
    args = ap.parse_args()
    scales = [s.strip() for s in args.scales.split(",")]
    paths = [p.strip() for p in args.paths.split(",")]
    if not paths or any(p not in ("per-node", "cohort") for p in paths):
        ap.error(f"--paths: {args.paths!r}; allowed: per-node, cohort")
    unknown = [s for s in scales if s not in SCALES]
    if unknown:
        ap.error(f"--scales: unknown {unknown}; allowed: {', '.join(SCALES)}")
    args.out.mkdir(parents=True, exist_ok=True)
    flower = Flower(Path(tempfile.mkdtemp()) / "flwr-home")
    results: list[dict] = []
    yardstick: list[float] = []
    ceiling: list[float] = []
    try:
        for rep in range(args.reps):
            yardstick.append(cleanrl_steps_per_s())
            print(f"rep {rep}: CleanRL-style PPO {yardstick[-1]:,.0f} env steps/s", flush=True)
            ceiling.append(cohort_ceiling_steps_per_s())
            print(f"rep {rep}: a cohort of 50 in-process on one thread {ceiling[-1]:,.0f} env steps/s", flush=True)
            for scale in scales:
                for path in paths:
                    r = run_one(scale, path, args.rounds, rep, args.out, flower, args.cpus)
                    results.append(r)
                    print(f"rep {rep}: {scale:>5} nodes {path:>8}: {r['steps_per_s']:>9,.0f} steps/s, "
                          f"{r['s_per_round']:6.1f} s/round, peak {r['peak_rss_gb']:.2f} GB", flush=True)
    finally:
        flower.stop()
    (args.out / "scale.json").write_text(json.dumps({"runs": results, "cleanrl": yardstick,
                                                         "cohort_one_thread": ceiling}, indent=1))
    clean, one = statistics.median(yardstick), statistics.median(ceiling)
    print(f"\nCleanRL-style single PPO learner: {clean:,.0f} env steps/s (median of {len(yardstick)})")
    print(f"Compute ceiling: a cohort of 50 in-process on one thread {one:,.0f} env steps/s (median of "
          f"{len(ceiling)}), x {2 * args.cpus} CPUs for the 2 SuperNodes = {2 * args.cpus * one:,.0f} "
          f"= {2 * args.cpus * one / clean:.1f}x CleanRL (40x CleanRL would be {40 * clean:,.0f})")
    print(f"{'nodes':>6} {'path':>9} {'steps/s':>9} {'s/round':>8} {'peak GB':>8} {'x per-node':>10} {'x CleanRL':>9}")
    for scale in scales:
        med = {p: {k: statistics.median(r[k] for r in results if r["scale"] == scale and r["path"] == p)
                   for k in ("steps_per_s", "s_per_round", "peak_rss_gb")} for p in paths}
        for p in paths:
            m = med[p]
            ratio = m["steps_per_s"] / med["per-node"]["steps_per_s"] if "per-node" in med else float("nan")
            print(f"{scale:>6} {p:>9} {m['steps_per_s']:>9,.0f} {m['s_per_round']:>8.1f} {m['peak_rss_gb']:>8.2f} "
                  f"{ratio:>10.2f} {m['steps_per_s'] / clean:>9.1f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
    os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
    os.environ["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"  # fedrl run calls this venv's flwr
    sys.exit(main())
