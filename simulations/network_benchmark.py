"""Wall time per round over shaped links, with and without uplink compression.

    sudo python simulations/network_benchmark.py [--reps 2] [--rounds 4]

A real SuperLink and 2 SuperNodes, each in its own network namespace (``simulations/tooling/netlab.py``), every
link 100 ms RTT, 1% loss and 2 Mbit/s in each direction (netem where the kernel has it, else
the lab's userspace relay). For the default policy (64,64: 9,155 parameters) and a larger one
(256,256: 134,915) it runs fedrl with ``compression.up`` none and quantize (8 bits), interleaved
(A, B, A, B) because this machine's speed drifts. Each run trains ``--rounds`` rounds of 256 env
steps per node, without per-round evaluation; the table gives, per setting, the median round
time (the server's ``round_time_s``, rounds 2 on: round 1 also pays the nodes' first imports),
the median of the slowest node's training time in those rounds, the difference (the time the
round spent on the network and in Flower), and uplink bytes per round. Needs root.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the deployment harness lives with the tests

from tooling.netlab import HUB_ADDRESS, Link, NetLab, unavailable

from tests.e2e.deploy import Deployment, metrics_rows

SHAPED = Link(delay_ms=50, loss=0.01, rate_mbit=2)
MODELS = {"64,64": "algo.hidden='64,64'", "256,256": "algo.hidden='256,256'"}
UPLINK = {"none": "compression.up='none'", "quantize 8-bit": "compression.up='quantize' compression.bits=8"}


def one_run(dep: Deployment, out: Path, name: str, settings: str, rounds: int) -> dict[str, float]:
    overrides = (f"num-server-rounds={rounds} nodes.count=2 algo.local-steps=256 eval.every=0 eval.episodes=1 "
                 f"{settings} output-dir='{out}' run-name='{name}'")
    code, log = dep.flwr_run(overrides, 900)
    rows = metrics_rows(out / name)
    if code != 0 or len(rows) != rounds or any(r["nodes_failed"] for r in rows):
        raise RuntimeError(f"run {name} failed (exit {code}, {len(rows)} rounds)\n{log[-3000:]}")
    later = rows[1:]
    round_s = statistics.median(r["round_time_s"] for r in later)
    train_s = statistics.median(max(r["train_seconds"].values()) for r in later)
    up = statistics.median(r["bytes_up"] - p["bytes_up"] for p, r in zip(rows, later, strict=False))
    return {"round_s": round_s, "train_s": train_s, "net_s": round_s - train_s, "up_bytes": up}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    if (why := unavailable()) is not None:
        print(f"network benchmark: no network lab here: {why}", file=sys.stderr)
        return 2
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="fedrl-netbench-") as tmp, \
            NetLab(["server", "node0", "node1"], SHAPED, seed=0) as lab:
        print(f"links: {SHAPED} on every link, backend {lab.backend}", flush=True)
        dep = Deployment(Path(tmp) / "d", 2, wrap=lab.wrap, hosts=["node0", "node1"], link_ip=HUB_ADDRESS)
        try:
            dep.start()
            plan = [(m, c) for m in MODELS for c in UPLINK]
            for rep in range(args.reps):
                for m, c in plan:  # interleaved: each setting once per repetition
                    name = f"{m.replace(',', 'x')}-{c.split()[0]}-{rep}"
                    res = one_run(dep, Path(tmp) / "runs", name, f"{MODELS[m]} {UPLINK[c]}", args.rounds)
                    results.setdefault((m, c), []).append(res)
                    print(f"[rep {rep + 1}/{args.reps}] {m:8s} {c:15s} round {res['round_s']:.2f} s, train "
                          f"{res['train_s']:.2f} s, up {res['up_bytes']:,.0f} B ({time.time() - started:.0f} s)",
                          flush=True)
        finally:
            dep.stop()
    print(f"\n## Round time over {SHAPED.delay_ms * 2:g} ms RTT, {SHAPED.loss:.0%} loss, {SHAPED.rate_mbit:g} Mbit/s "
          f"links (2 SuperNodes, backend {lab.backend}, {args.reps} reps, medians)\n")
    print("| policy | uplink | round s | slowest node's training s | network + Flower s | up B/round | "
          "round × none |")
    print("|---|---|---|---|---|---|---|")
    for m in MODELS:
        base = statistics.median(r["round_s"] for r in results[(m, "none")])
        for c in UPLINK:
            rs = results[(m, c)]
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(f"| {m} | {c} | {med['round_s']:.2f} | {med['train_s']:.2f} | {med['net_s']:.2f} | "
                  f"{med['up_bytes']:,.0f} | {med['round_s'] / base:.2f} |")
    print(json.dumps({f"{m}|{c}": v for (m, c), v in results.items()}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
