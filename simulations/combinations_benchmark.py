"""Issue 18's combinations, each over seeds: does every one solve heterogeneous CartPole on every seed?

    python simulations/combinations_benchmark.py [--seeds 3] [--first-seed 0] [--only NAME,NAME]
        [--out simulations/results-combinations]

Each combination of an update feature (compression, DP) with an aggregation rule (PowerSGD on the
star, FedBuff and FedAsync, gossip, the hierarchy, deadline selection) runs through ``fedrl run``
in Flower's Simulation Engine on the default experiment's heterogeneous CartPole (pole length 0.4
to 1.2, 8 nodes) for its whole budget of rounds, so the final model is the one kept after the last
round, not one caught at a good round. "Solved" is the brief's: the final model and the best model
both reach 475 on every evaluated variant. The DP combinations need crowds (docs/privacy.md, "When DP learns: the crowd"),
so those at ε <= 8 run their presets (``simulations/configs/cartpole_1000_fedbuff.toml``,
``cartpole_2000_hierarchical.toml``: 1,000 and 2,000 nodes in cohorts on 2 SuperNodes) and, as the
presets do, stop once solved (further rounds spend ε and add noise); the others say their noise
multiplier.

The table: per combination, final solves out of its runs, the final worst variant (median [min,
max]), rounds run (median [min, max]), ε, uplink bytes per node update (median), seconds
per run. Runs are seed-major (every combination of seed 0, then seed 1, ...) because this
machine's speed drifts; a restart skips the runs already in ``--out/runs.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import BIN, REPO, Flower, _join
from privacy_sweep import preset

TARGET = 475.0
# Evaluating 8 variants x 5 episodes costs more than a round's training once the policy is good, so
# the 8-node runs evaluate every 5th round (the final model is always evaluated). FedBuff steps on 4
# updates, half a round of 8: 60 steps are 30 rounds' worth; FedAsync's 240 steps too.
EVERY = "eval.every=5"  # a default: a combination's own eval.every wins
BUFFERED = "num-server-rounds=60 eval.every=6"
# The mirror-symmetric policy (docs/privacy.md, "Mirror-symmetric policies"; it needs uncentred
# statistics): where the kept model is mostly one node's update, or carries DP noise, it can learn
# to drive the cart off one side, which the mirror rules out.
MIRROR = "algo.mirror=true algo.norm-obs-center=false"
MIXED = ("strategy.name='fedasync' nodes.speed='linspace(1, 2)' num-server-rounds=240 eval.every=24 "
         f"strategy.ema=0.9 {MIRROR}")


def _preset(name: str) -> str:
    """A preset in simulations/configs as run-config pairs (one source for the settings)."""
    return preset(str(REPO / "simulations" / "configs" / name))


# name -> (SuperNodes, run-config); the name says what composes with what.
COMBINATIONS: dict[str, tuple[int, str]] = {
    "star x powersgd r2": (8, "compression.up='powersgd' compression.rank=2"),
    "star x powersgd r2 8-bit": (8, "compression.up='powersgd' compression.rank=2 compression.factor-bits=8"),
    "fedbuff x quantize 8-bit": (8, ("strategy.name='fedbuff' strategy.buffer=4 nodes.speed='linspace(1, 2)' "
                                    f"compression.up='quantize' {BUFFERED}")),
    "fedbuff x topk 10% + EF": (8, ("strategy.name='fedbuff' strategy.buffer=4 nodes.speed='linspace(1, 2)' "
                                   f"compression.up='topk' compression.fraction=0.1 {BUFFERED}")),
    # FedAsync's model is mostly the last node's (x += 0.6 s(tau) (x_i - x)), so the model it keeps
    # is the average of its last ones (strategy.ema), with the mirror; without both it missed a
    # variant on 5 of 12 runs (README, "Combinations (issue 18)")
    "fedasync x quantize 8-bit x mirror x ema 0.9": (8, f"{MIXED} compression.up='quantize'"),
    "fedasync x topk 10% + EF x mirror x ema 0.9": (8, f"{MIXED} compression.up='topk' compression.fraction=0.1"),
    "gossip x CHOCO 8-bit": (8, "topology.name='gossip' topology.graph='exponential' compression.up='quantize'"),
    "gossip x CHOCO topk 10%": (8, ("topology.name='gossip' topology.graph='ring' compression.up='topk' "
                                   "compression.fraction=0.1 topology.consensus-step=0.3")),
    # issue 43: the default consensus step (auto) on a ring, where gamma = 1 left a variant at 18-75
    "gossip ring x CHOCO topk 5% (auto step)": (8, ("topology.name='gossip' topology.graph='ring' "
                                                   "compression.up='topk' compression.fraction=0.05")),
    "gossip ring x CHOCO 8-bit (auto step)": (8, "topology.name='gossip' topology.graph='ring' compression.up='quantize'"),
    "hierarchical x quantize 8-bit": (8, "topology.name='hierarchical' topology.edges=2 compression.up='quantize'"),
    "hierarchical x secagg 8-bit": (8, ("topology.name='hierarchical' topology.edges=2 secagg.enabled=true "
                                       "compression.up='quantize'")),
    "deadline x secagg 8-bit": (8, ("selection.name='deadline' fraction-train=0.75 round.deadline-s=10.0 "
                                   "nodes.speed='1,1,1,1,1,1,1,12' secagg.enabled=true compression.up='quantize'")),
    # DP at a loose ε: the mechanisms compose and learn when their noise is small next to an update
    # (docs/privacy.md, "When DP learns: the crowd", says why 8 nodes cannot learn at ε = 8)
    "gossip x CHOCO 8-bit x local DP z=0.003": (8, (
        "topology.name='gossip' topology.graph='exponential' compression.up='quantize' privacy.mode='local' "
        "privacy.noise-multiplier=0.003 privacy.clip-norm=1.0")),
    "fedbuff x quantize 8-bit x central DP z=0.01 x mirror": (8, (
        "strategy.name='fedbuff' strategy.buffer=4 nodes.speed='linspace(1, 2)' compression.up='quantize' "
        f"{BUFFERED} privacy.mode='central' privacy.noise-multiplier=0.01 privacy.clip-norm=1.0 {MIRROR}")),
    # at ε <= 8 with a crowd: the presets (each file says why its settings)
    "fedbuff x quantize 8-bit x central DP (1000 nodes)": (2, _preset("cartpole_1000_fedbuff.toml")),
    "hierarchical x secagg 8-bit x DP at the edge (2000 nodes)": (2, _preset("cartpole_2000_hierarchical.toml")),
}


def record(folder: Path, seconds: float) -> dict:
    """What the table needs from one run folder."""
    summary = json.loads((folder / "summary.json").read_text())
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines() if x.strip()]
    updates = sum(len(r.get("nodes_trained") or []) for r in rows)
    final = [e["mean_return"] for e in summary["eval"]]
    return {"final_min": min(final), "final_mean": statistics.fmean(final),
            "best_min": summary.get("best_eval_min_return"), "rounds": summary["rounds_completed"],
            "epsilon": summary.get("epsilon"), "bytes_up_per_update": summary["bytes_up_total"] / max(updates, 1),
            "seconds": round(seconds, 1)}


def run_one(flower: Flower, out: Path, name: str, supernodes: int, rc: str) -> dict:
    shutil.rmtree(out / name, ignore_errors=True)
    cmd = [str(BIN / "fedrl"), "run", str(REPO), "--run-config", _join(rc, f"output-dir='{out}' run-name='{name}'"),
           "--federation-config", f"num-supernodes={supernodes} client-resources-num-cpus=1"]
    t0 = time.time()
    res = subprocess.run(cmd, env=flower.env, capture_output=True, text=True, cwd=REPO, check=False)
    if res.returncode != 0 or not (out / name / "summary.json").exists():
        raise RuntimeError(f"{name} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return record(out / name, time.time() - t0)


def _spread(xs: list[float], spec: str = ".0f") -> str:
    return f"{statistics.median(xs):{spec}} [{min(xs):{spec}}, {max(xs):{spec}}]" if xs else "-"


def report(done: list[dict]) -> None:
    print(f"\n{'combination':<58}{'solved':>7}  {'final worst variant':<22}{'rounds':<16}{'ε':>8}"
          f"{'B up/update':>13}{'s/run':>7}")
    for combo in COMBINATIONS:
        rs = [r for r in done if r["combination"] == combo]
        if not rs:
            continue
        ok = sum(r["final_min"] >= TARGET and (r["best_min"] or 0) >= TARGET for r in rs)
        eps = [r["epsilon"] for r in rs if r["epsilon"] is not None]
        print(f"{combo:<58}{f'{ok}/{len(rs)}':>7}  {_spread([r['final_min'] for r in rs]):<22}"
              f"{_spread([r['rounds'] for r in rs]):<16}{(f'{max(eps):.2f}' if eps else '-'):>8}"
              f"{statistics.median(r['bytes_up_per_update'] for r in rs):>13,.0f}"
              f"{statistics.median(r['seconds'] for r in rs):>7.0f}")
    ok = sum(r["final_min"] >= TARGET and (r["best_min"] or 0) >= TARGET for r in done)
    print(f"\nsolved every variant (final and best): {ok} of {len(done)} runs; ε is the largest over the seeds")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma-separated combination names (default: all; names hold no commas)")
    ap.add_argument("--out", type=Path, default=REPO / "simulations" / "results-combinations")
    args = ap.parse_args()
    chosen = [c.strip() for c in args.only.split(",") if c.strip()] or list(COMBINATIONS)
    if unknown := [c for c in chosen if c not in COMBINATIONS]:
        ap.error(f"--only: unknown combination(s) {unknown}; known: {list(COMBINATIONS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "runs.jsonl"
    done = {r["name"]: r for r in map(json.loads, log.read_text().splitlines() if log.exists() else [])}
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    todo = [(f"{c.replace(' ', '_').replace(',', '')}-s{s}", c, s) for s in seeds for c in chosen]
    flower = Flower(args.out / ".flwr-home")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    t_start, ran = time.time(), 0
    try:
        for name, combo, seed in todo:
            if name in done:
                continue
            supernodes, rc = COMBINATIONS[combo]
            r = run_one(flower, args.out, name, supernodes, _join(EVERY, rc, f"seed={seed}")) | {
                "name": name, "combination": combo, "seed": seed}
            done[name] = r
            with log.open("a") as fh:
                fh.write(json.dumps(r) + "\n")
            ran += 1
            left = sum(n not in done for n, _, _ in todo)
            print(f"[{ran}, {left} left, ~{(time.time() - t_start) / ran * left / 60:.0f} min] {combo} seed {seed}: "
                  f"final worst {r['final_min']:.0f}, best worst {r['best_min']}, {r['rounds']} rounds, "
                  f"{r['seconds']:.0f} s", flush=True)
    finally:
        flower.stop()
    report([done[n] for n, _, _ in todo if n in done])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
