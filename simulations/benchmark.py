"""Federated vs local-only vs centralized, side by side, on heterogeneous CartPole and Pendulum.

    python simulations/benchmark.py [--reps 2] [--only cartpole|pendulum] [--out simulations/results]

Runs are interleaved (A, B, C, A, B, C, ...) because this machine's speed drifts; the table
reports medians over repetitions and ratios of medians. The federation runs through
``fedrl run`` in Flower's Simulation Engine (a private local SuperLink, one SuperNode per
node, one CPU per ClientApp so two run at once); the baselines through ``fedrl central`` and ``strategy.name=local``.

Columns: env steps and wall seconds until every variant's eval return reaches the target
(blank if never), final eval return per variant, and env steps per second over the run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

SUITES: dict[str, dict[str, str]] = {
    "cartpole": {
        "common": "env.id='CartPole-v1' env.vary='length=linspace(0.4, 1.2)' num-server-rounds=40 "
                  "eval.stop-at-target=true",
        "default-alone": "env.vary=''",
    },
    "pendulum": {
        "common": "env.id='Pendulum-v1' env.vary='g=linspace(8.0, 12.0); m=linspace(0.8, 1.2)' "
                  "num-server-rounds=48 eval.target-return='-200' eval.every=4 eval.stop-at-target=true "
                  "ppo.num-steps=128 algo.local-steps=1024 ppo.lr=0.0003 "
                  "ppo.update-epochs=10 ppo.num-minibatches=32 strategy.server-lr-end=-1",  # as the preset
    },
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Flower:
    """A private local SuperLink for the federated runs (own FLWR_HOME and ports)."""

    def __init__(self, home: Path) -> None:
        self.control = _free_port()
        self.env = {**os.environ, "FLWR_HOME": str(home), "FLWR_LOCAL_CONTROL_API_PORT": str(self.control),
                    "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(_free_port())}

    def stop(self) -> None:
        """Stop our SuperLink and the SuperExec sessions (simulation, Ray) it started."""
        links = _pids_with(f"127.0.0.1:{self.control}")
        for pid in [p for link in links for p in _pids_with(f"--parent-pid {link}")] + links:
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except OSError:
                pass


def _pids_with(fragment: str) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if fragment.encode() in (p / "cmdline").read_bytes():
                    out.append(int(p.name))
            except OSError:
                pass
    return out


def _join(*parts: str) -> str:
    """Merge ``k=v`` override strings; later parts win (Flower refuses a repeated key)."""
    merged: dict[str, str] = {}
    for part in parts:
        for key, value in re.findall(r"""([\w.-]+)=('[^']*'|"[^"]*"|\S+)""", part):
            merged[key] = value
    return " ".join(f"{k}={v}" for k, v in merged.items())


def fedrl_command(kind: str, rc: str, supernodes: int = 8) -> list[str]:
    """``fedrl run`` in the Simulation Engine (``supernodes`` SuperNodes, one CPU per ClientApp) for
    ``federated``, else ``fedrl central``, with run-config ``rc``."""
    if kind == "federated":
        return [str(BIN / "fedrl"), "run", str(REPO), "--run-config", rc,
                "--federation-config", f"num-supernodes={supernodes} client-resources-num-cpus=1"]
    return [str(BIN / "fedrl"), "central", str(REPO), "--run-config", rc]


def run_one(kind: str, suite: str, rep: int, out: Path, flower: Flower) -> dict:
    spec = SUITES[suite]
    name = f"{suite}-{kind}-{rep}"
    shutil.rmtree(out / name, ignore_errors=True)
    extra = {"local": "strategy.name='local'", "central-default": spec.get("default-alone", "")}.get(kind, "")
    rc = _join(spec["common"], f"seed={rep} output-dir='{out}' run-name='{name}'", extra)
    cmd = fedrl_command("federated" if kind in ("federated", "local") else "central", rc)
    t0 = time.time()
    res = subprocess.run(cmd, env=flower.env, capture_output=True, text=True, cwd=REPO, check=False)
    elapsed = time.time() - t0
    folder = out / name
    if res.returncode != 0 or not (folder / "summary.json").exists():
        raise RuntimeError(f"{name} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    summary = json.loads((folder / "summary.json").read_text())
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    target = summary["target_return"]
    hit = next((r for r in rows if r.get("eval_min_return") is not None and r["eval_min_return"] >= target), None)
    train_s = sum(r["round_time_s"] for r in rows)
    return {
        "kind": kind, "rep": rep, "solved_steps": hit["env_steps"] if hit else None,
        "solved_s": hit["wall_time_s"] if hit else None,
        "final": [e["mean_return"] for e in summary["eval"]],
        "steps_per_s": summary["env_steps_total"] / train_s, "command_s": elapsed,
    }


def med(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if len(vals) == len(xs) and vals else None


def fmt(x: float | None, spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--only", choices=list(SUITES), action="append")
    ap.add_argument("--out", type=Path, default=REPO / "simulations" / "results")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    flower = Flower(args.out / ".flwr-home")
    # Turn SIGTERM into an exception so the SuperLink we started is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    results: dict[str, list[dict]] = {}
    try:
        for suite in args.only or list(SUITES):
            kinds = ["federated", "central", "local"] + (["central-default"] if "default-alone" in SUITES[suite] else [])
            for rep in range(args.reps):
                for kind in kinds:  # interleaved: A, B, C, A, B, C
                    r = run_one(kind, suite, rep, args.out, flower)
                    results.setdefault(f"{suite}/{kind}", []).append(r)
                    print(f"[{suite} rep {rep}] {kind:<16} solved at {fmt(r['solved_steps'])} steps, "
                          f"{r['steps_per_s']:,.0f} steps/s, final min {min(r['final']):.1f}", flush=True)
    finally:
        flower.stop()
    print(f"\n{'suite/kind':<28}{'steps to solve':>15}{'s to solve':>11}{'steps/s':>10}  final return per variant")
    for key, rs in results.items():
        finals = [statistics.median(x) for x in zip(*[r["final"] for r in rs], strict=True)]
        print(f"{key:<28}{fmt(med([r['solved_steps'] for r in rs])):>15}{fmt(med([r['solved_s'] for r in rs]), '.1f'):>11}"
              f"{fmt(med([r['steps_per_s'] for r in rs])):>10}  {' '.join(f'{f:.0f}' for f in finals)}")
    print("\nratios (medians):")
    for suite in args.only or list(SUITES):
        fed, cen = results.get(f"{suite}/federated"), results.get(f"{suite}/central")
        if fed and cen:
            sf, sc = med([r["steps_per_s"] for r in fed]), med([r["steps_per_s"] for r in cen])
            if sf is not None and sc:
                print(f"  {suite}: federated/centralized env steps per second = {sf / sc:.2f}  (target >= 0.7)")
        alone = results.get(f"{suite}/central-default")
        if fed and alone:
            a, b = med([r["solved_steps"] for r in fed]), med([r["solved_steps"] for r in alone])
            ratio = "-" if a is None or b is None else f"{a / b:.2f}"
            print(f"  {suite}: federated steps to solve every variant / centralized steps on default alone = "
                  f"{ratio}  (target <= 1.5)")
    (args.out / "benchmark.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
