"""Aggregation topologies and robustness, measured side by side in one invocation.

    python simulations/aggregation_benchmark.py [--only topologies|byzantine] [--reps 2]
        [--out simulations/results-aggregation]

(a) topologies: heterogeneous CartPole (8 nodes, pole length 0.4 to 1.2, nodes 1x to 3x slow
    with ``nodes.speed='linspace(1, 3)'``) through ``fedrl run`` (Flower's Simulation Engine, 8
    SuperNodes, Ray told of 8 CPUs so all 8 ClientApps can be in flight: a slow node's sleep must
    not hold one of only two workers): star FedAvg, hierarchical (2 edges, cloud every 2
    rounds), gossip on a ring and on the exponential graph, and FedBuff (K = 4). Per run: rounds
    (server steps) and env steps until every variant's eval return reaches 475 (gossip: every
    node's model on its own variant), bytes per round on each tier (node up, node down, and
    edge-cloud for hierarchical), and wall time to solve. Runs are interleaved (A, B, C, ..., A,
    B, C, ...) because this machine's speed drifts; the table reports medians over ``--reps`` and
    wall-time ratios to the star.
(b) Byzantine nodes: 10 nodes, 20 rounds, 0 to 3 of them sending minus 10 times their update
    (``attack.name='sign-flip' attack.scale=10``); final eval return (mean and worst variant)
    for FedAvg, coordinate-wise median, trimmed mean (``strategy.trim=0.3``) and Krum (f = the
    number of attackers).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import REPO, Flower, _join
from compression_benchmark import _fedrl, _load

SLOW = "nodes.speed='linspace(1, 3)'"
CARTPOLE = "env.id='CartPole-v1' env.vary='length=linspace(0.4, 1.2)' eval.stop-at-target=true"
TOPOLOGIES: dict[str, str] = {
    "star": "strategy.name='fedavg' num-server-rounds=40",
    "hierarchical": "topology.name='hierarchical' topology.edges=2 topology.cloud-every=2 num-server-rounds=40",
    "gossip-ring": "topology.name='gossip' topology.graph='ring' num-server-rounds=40",
    "gossip-exp": "topology.name='gossip' topology.graph='exponential' num-server-rounds=40",
    "fedbuff": "strategy.name='fedbuff' strategy.buffer=4 num-server-rounds=80",  # a step per 4 updates, not 8
}
RULES: dict[str, str] = {
    "fedavg": "strategy.name='fedavg'",
    "median": "strategy.name='median'",
    "trimmed-mean": "strategy.name='trimmed-mean' strategy.trim=0.3",
    "krum": "strategy.name='krum'",
}
ATTACKERS = [9, 4, 1]  # the first f of these attack


def _deltas(rows: list[dict], key: str) -> list[float]:
    prev, out = 0, []
    for r in rows:
        out.append(float(r.get(key, 0) - prev))
        prev = r.get(key, 0)
    return out


def topology_run(flower: Flower, out: Path, name: str, rep: int) -> dict:
    run = f"topo-{name}-{rep}"
    shutil.rmtree(out / run, ignore_errors=True)
    rc = _join(CARTPOLE, SLOW, "eval.every=1 eval.episodes=3", f"seed={rep}",
               TOPOLOGIES[name], f"output-dir='{out}' run-name='{run}'")
    _fedrl(flower, rc, 8, federation="init-args-num-cpus=8")
    summary, rows = _load(out / run)
    target = summary["target_return"]
    hit = next((r for r in rows if r.get("eval_min_return", -np.inf) >= target), None)
    return {"name": name, "rep": rep, "solved_round": hit["round"] if hit else None,
            "solved_env_steps": hit["env_steps"] if hit else None,
            "solved_wall_s": hit["wall_time_s"] if hit else None,
            "rounds": len(rows), "wall_s": summary["wall_time_s"],
            "up_per_round": statistics.median(_deltas(rows, "bytes_up")),
            "down_per_round": statistics.median(_deltas(rows, "bytes_down")),
            "cloud_per_round": statistics.mean(_deltas(rows, "bytes_cloud")) if "bytes_cloud" in rows[0] else None,
            "final_min": summary["eval_min_return"]}


def topologies(flower: Flower, out: Path, reps: int) -> dict[str, list[dict]]:
    res: dict[str, list[dict]] = {}
    for rep in range(reps):
        for name in TOPOLOGIES:  # interleaved over repetitions
            r = topology_run(flower, out, name, rep)
            res.setdefault(name, []).append(r)
            print(f"[topologies rep {rep}] {name:<13} solved at round {r['solved_round']} "
                  f"({r['solved_env_steps']} env steps, {r['solved_wall_s'] or float('nan'):.0f} s); "
                  f"up {r['up_per_round']:,.0f} B/round down {r['down_per_round']:,.0f}", flush=True)
    return res


def _med(vals: list[float | None]) -> float | None:
    v = [x for x in vals if x is not None]
    return statistics.median(v) if v else None


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)


def topology_table(res: dict[str, list[dict]]) -> None:
    print("\n(a) heterogeneous CartPole, 8 nodes 1x-3x slow: medians over repetitions (solved: every variant >= 475)")
    print(f"{'topology':<14}{'solved':>7}{'round':>7}{'env steps':>11}{'wall s':>8}{'x star':>7}"
          f"{'up B/round':>12}{'down B/round':>13}{'cloud B/round':>14}")
    star = _med([r["solved_wall_s"] for r in res.get("star", [])])
    for name, rs in res.items():
        wall = _med([r["solved_wall_s"] for r in rs])
        ratio = None if wall is None or not star else wall / star
        print(f"{name:<14}{sum(r['solved_round'] is not None for r in rs):>5}/{len(rs)}"
              f"{_fmt(_med([r['solved_round'] for r in rs])):>7}{_fmt(_med([r['solved_env_steps'] for r in rs])):>11}"
              f"{_fmt(wall):>8}{_fmt(ratio, '.2f'):>7}{_fmt(_med([r['up_per_round'] for r in rs])):>12}"
              f"{_fmt(_med([r['down_per_round'] for r in rs])):>13}{_fmt(_med([r['cloud_per_round'] for r in rs])):>14}")
    print("round = server steps (FedBuff: one per 4 updates); bytes per round over all nodes; cloud: edge <-> cloud")


def byzantine_run(flower: Flower, out: Path, rule: str, f: int) -> dict:
    run = f"byz-{rule}-{f}"
    shutil.rmtree(out / run, ignore_errors=True)
    attack = (f"attack.name='sign-flip' attack.scale=10 attack.nodes='{','.join(map(str, ATTACKERS[:f]))}'"
              if f else "")
    rc = _join("env.id='CartPole-v1' env.vary='length=linspace(0.4, 1.2)' nodes.count=10 num-server-rounds=20 "
               "eval.every=0", RULES[rule], attack, f"output-dir='{out}' run-name='{run}'")
    _fedrl(flower, rc, 10)
    summary, _ = _load(out / run)
    return {"rule": rule, "f": f, "mean": summary["eval_mean_return"], "min": summary["eval_min_return"]}


def byzantine(flower: Flower, out: Path) -> list[dict]:
    res = []
    for f in range(4):
        for rule in RULES:
            r = byzantine_run(flower, out, rule, f)
            res.append(r)
            print(f"[byzantine] {rule:<13} f={f}: final mean {r['mean']:.1f} min {r['min']:.1f}", flush=True)
    return res


def byzantine_table(res: list[dict]) -> None:
    print("\n(b) final eval return (mean / worst variant) with f of 10 nodes sending -10x their update, 20 rounds")
    print(f"{'rule':<14}" + "".join(f"{f'f = {f}':>14}" for f in range(4)))
    for rule in RULES:
        cells = {r["f"]: f"{r['mean']:.0f} / {r['min']:.0f}" for r in res if r["rule"] == rule}
        print(f"{rule:<14}" + "".join(f"{cells.get(f, '-'):>14}" for f in range(4)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["topologies", "byzantine"], action="append")
    ap.add_argument("--reps", type=int, default=2, help="(a): repetitions (seeds 0..reps-1)")
    ap.add_argument("--out", type=Path, default=REPO / "simulations" / "results-aggregation")
    args = ap.parse_args()
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    args.out.mkdir(parents=True, exist_ok=True)
    flower = Flower(args.out / ".flwr-home")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    parts = args.only or ["topologies", "byzantine"]
    topo: dict[str, list[dict]] = {}
    byz: list[dict] = []
    try:
        if "topologies" in parts:
            topo = topologies(flower, args.out, args.reps)
        if "byzantine" in parts:
            byz = byzantine(flower, args.out)
    finally:
        flower.stop()
    if topo:
        topology_table(topo)
    if byz:
        byzantine_table(byz)
    (args.out / "aggregation_benchmark.json").write_text(json.dumps({"topologies": topo, "byzantine": byz}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
