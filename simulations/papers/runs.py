"""What the paper scripts share: one ``fedrl run`` through Flower's Simulation Engine (a private
local SuperLink, as ``simulations/benchmark.py``), and what a paper's x-axis needs from its run
folder (trajectories per agent, the return at a trajectory count, the first count at a target).
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmark import REPO, Flower, _join, fedrl_command

__all__ = ["Flower", "Run", "at", "first_at", "fmt", "held_from", "median_or_none", "run"]


class Run:
    """One finished run: its per-round rows and summary, with the x-axis the papers use."""

    def __init__(self, folder: Path, seconds: float) -> None:
        self.folder = folder
        self.seconds = seconds
        self.summary = json.loads((folder / "summary.json").read_text())
        self.rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines() if x.strip()]

    def trajectories(self, steps_per_return: float = 1.0) -> list[float]:
        """Cumulative trajectories per agent after each row's round: the round's env steps per node
        over each node's mean training return, averaged over the nodes that trained. Exact for
        CartPole's completed episodes (return = length, ``steps_per_return`` = 1); an episode cut by
        the round's end counts as the fraction it ran. Acrobot's return is minus its length:
        pass ``steps_per_return = -1``."""
        out, total, prev_steps = [], 0.0, 0
        for r in self.rows:
            steps = r["env_steps"] - prev_steps
            prev_steps = r["env_steps"]
            rets = [v for v in (r.get("train_returns") or {}).values() if v]
            nodes = max(len(r.get("nodes_trained") or []), 1)
            if rets:
                per_node = steps / nodes
                total += statistics.fmean(per_node / max(abs(steps_per_return * v), 1.0) for v in rets)
            out.append(total)
        return out

    def evals(self, steps_per_return: float = 1.0) -> list[tuple[float, float, float]]:
        """``(trajectories per agent, worst-variant eval return, mean eval return)`` at each evaluated round."""
        xs = self.trajectories(steps_per_return)
        return [(x, r["eval_min_return"], r.get("eval_mean_return", r["eval_min_return"]))
                for x, r in zip(xs, self.rows) if r.get("eval_min_return") is not None]


def run(flower: Flower, out: Path, name: str, rc: str, supernodes: int = 2) -> Run:
    """``fedrl run`` with run-config ``rc`` into ``out/name``; raises with the run's output on failure."""
    shutil.rmtree(out / name, ignore_errors=True)
    cmd = fedrl_command("federated", _join(rc, f"output-dir='{out}' run-name='{name}' nodes.wait-s=600"),
                        supernodes=supernodes)
    t0 = time.time()
    res = subprocess.run(cmd, env=flower.env, capture_output=True, text=True, cwd=REPO, check=False)
    if res.returncode != 0 or not (out / name / "summary.json").exists():
        raise RuntimeError(f"{name} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return Run(out / name, time.time() - t0)


def first_at(evals: list[tuple[float, float, float]], target: float, mean: bool = False) -> float | None:
    """The first trajectory count whose eval (worst variant, or mean) reaches ``target``; None if never."""
    return next((x for x, lo, avg in evals if (avg if mean else lo) >= target), None)


def held_from(evals: list[tuple[float, float, float]], target: float, mean: bool = False) -> float | None:
    """The trajectory count of the evaluation from which every later one reaches ``target``; None
    if the last one does not."""
    start = None
    for x, lo, avg in evals:
        if (avg if mean else lo) >= target:
            start = x if start is None else start
        else:
            start = None
    return start


def at(evals: list[tuple[float, float, float]], x: float, mean: bool = False) -> float | None:
    """The eval return (worst variant, or mean) of the last evaluation at or before ``x``
    trajectories per agent (a run that ended sooner, at its target or its budget, gives its last
    evaluation); None if nothing was evaluated by then."""
    seen = [(avg if mean else lo) for t, lo, avg in evals if t <= x]
    if seen:
        return seen[-1]
    return None


def median_or_none(xs: Sequence[float | None]) -> float | None:
    vals = [v for v in xs if v is not None]
    return statistics.median(vals) if vals else None


def fmt(x: float | None, spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)
