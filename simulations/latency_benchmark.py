"""Round-latency floor of Flower's Deployment Engine: fedrl's message loop vs ``Grid.send_and_receive``.

    python simulations/latency_benchmark.py [--nodes 2 8] [--rounds 5] [--reps 2]

For each node count N: a real local Deployment (one insecure SuperLink and N SuperNodes, private
FLWR_HOME, free ports: ``tests.e2e.deploy.Deployment``) runs ``simulations/latency_app`` with
``flwr run --stream``, alternating ``mode=fedrl`` and ``mode=flower`` (fedrl, flower, fedrl, ...,
``--reps`` each, because this machine's speed drifts). A round sends one empty ``train`` message to
each SuperNode and waits for all replies; the ClientApp answers at once, so a round's time is
Flower's floor: the SuperNode's own polling (Flower 1.42: an idle SuperNode pulls the SuperLink
every 3 s, its SuperExec looks for tasks every 1 s, and it checks for the reply every 0.5 s), one
fresh ClientApp process per message, SuperLink round trips, and the ServerApp's polling. ``fedrl``
polls ``pull_messages`` every 20-50 ms (``fedrl.flower.transport.push_and_collect``); ``flower`` is
Flower 1.42's ``HttpGrid.send_and_receive``, which sleeps a fixed 3 s after each pull that leaves
replies outstanding (``flwr/superlink/grid/http_grid.py``), so its rounds end on multiples of 3 s.

A third cell, ``tuned``, runs ``mode=fedrl`` on a second deployment whose SuperNodes get
``FLWR_SUPEREXEC_TASK_POLL_INTERVAL=0.1`` (the one poll setting Flower 1.42 exposes on the node
side; the SuperNode's 3 s idle pull is hard-coded). Both deployments run side by side (the idle
one only polls), so the three cells interleave: fedrl, flower, tuned, fedrl, ...

Prints progress, then a markdown table: per N the median round time of each mode over all timed
rounds of all reps, the flower/fedrl ratio, and each rep's median. ``flwr run --stream`` exits 0
even when the ServerApp failed, so a rep counts only if it wrote its JSON file; otherwise this
script raises with the run's output.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "simulations" / "latency_app"
sys.path.insert(0, str(REPO))
from tests.e2e.deploy import Deployment

MODES = ("fedrl", "flower")
CELLS = (("fedrl", "default"), ("flower", "default"), ("fedrl", "tuned"))  # (mode, deployment), interleaved
TUNED_POLL_S = 0.1  # FLWR_SUPEREXEC_TASK_POLL_INTERVAL on the tuned deployment's SuperNodes (Flower: 1.0)


def run_rep(dep: Deployment, mode: str, nodes: int, rounds: int, out: Path, timeout: float = 900) -> list[float]:
    """One ``flwr run`` of the latency app; the timed rounds' seconds. Raises if it wrote no result."""
    rc = f"mode='{mode}' rounds={rounds} nodes={nodes} out='{out}'"
    res = dep.cli("run", str(APP), dep.connection, "--stream", "--run-config", rc, timeout=timeout)
    if not out.exists():
        raise RuntimeError(f"{mode} with {nodes} nodes wrote no {out} (flwr run exit {res.returncode}):\n"
                           f"{res.stdout[-4000:]}\n{res.stderr[-4000:]}\n{dep.log_text()}")
    data = json.loads(out.read_text())
    if data["mode"] != mode or data["nodes"] != nodes or len(data["round_s"]) != rounds:
        raise RuntimeError(f"unexpected result in {out}: {data}")
    return [float(x) for x in data["round_s"]]


def bench(nodes: int, rounds: int, reps: int, root: Path) -> dict[str, list[list[float]]]:
    """All reps for one node count: cell name -> per-rep lists of round seconds."""
    deps = {"default": Deployment(root / f"nodes{nodes}", nodes), "tuned": Deployment(root / f"nodes{nodes}-tuned", nodes)}
    deps["tuned"].env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = str(TUNED_POLL_S)
    times: dict[str, list[list[float]]] = {_cell(m, d): [] for m, d in CELLS}
    try:
        for name, dep in deps.items():
            t0 = time.perf_counter()
            dep.start()
            print(f"[{nodes} nodes] {name} deployment up in {time.perf_counter() - t0:.1f} s", flush=True)
        for rep in range(reps):
            for mode, d in CELLS:
                t0 = time.perf_counter()
                secs = run_rep(deps[d], mode, nodes, rounds, root / f"n{nodes}-{mode}-{d}-{rep}.json")
                times[_cell(mode, d)].append(secs)
                print(f"[{nodes} nodes] rep {rep + 1}/{reps} {_cell(mode, d):12s}: rounds "
                      f"{' '.join(f'{s:.3f}' for s in secs)} s (median {statistics.median(secs):.3f} s; "
                      f"flwr run {time.perf_counter() - t0:.1f} s)", flush=True)
    finally:
        for dep in deps.values():
            dep.stop()
    return times


def _cell(mode: str, deployment: str) -> str:
    return mode if deployment == "default" else f"{mode}+{deployment}"


def table(results: dict[int, dict[str, list[list[float]]]]) -> str:
    """The markdown table: medians over all timed rounds, ratios to fedrl, and per-rep medians."""
    cells = [_cell(m, d) for m, d in CELLS]
    lines = [("| nodes | fedrl s | Flower send_and_receive s | ÷ fedrl | fedrl + SuperExec poll "
             f"{TUNED_POLL_S:g} s | ÷ fedrl | per-rep medians ({', '.join(cells)}) |"), "|---:|---:|---:|---:|---:|---:|---|"]
    for nodes, times in results.items():
        med = {c: statistics.median([s for rep in times[c] for s in rep]) for c in cells}
        per = "; ".join(", ".join(f"{statistics.median(rep):.2f}" for rep in times[c]) for c in cells)
        f, fl, tu = med["fedrl"], med["flower"], med["fedrl+tuned"]
        lines.append(f"| {nodes} | {f:.2f} | {fl:.2f} | {fl / f:.2f} | {tu:.2f} | {tu / f:.2f} | {per} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[2, 8], help="SuperNode counts to measure")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per run (after one warm-up round)")
    ap.add_argument("--reps", type=int, default=2, help="runs per mode per node count, interleaved")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="fedrl-latency-"))
    t0 = time.perf_counter()
    try:
        results = {n: bench(n, args.rounds, args.reps, root) for n in args.nodes}
    except BaseException:
        print(f"logs kept in {root}", file=sys.stderr)
        raise
    shutil.rmtree(root, ignore_errors=True)
    print(f"\nround latency, Deployment Engine on localhost ({args.rounds} timed rounds x {args.reps} reps per cell; "
          f"total {time.perf_counter() - t0:.0f} s)\n")
    print(table(results))


if __name__ == "__main__":
    main()
