"""Replay a finished run's kept models (final and best) on fresh episodes of every node's variant.

A run's own evaluation uses ``eval.episodes`` episodes on ``eval.nodes`` of the variants, the
same episodes at every evaluation, and the best model is picked on them. This script checks the
models a user keeps on episodes the run never saw: every node's variant (all of ``nodes.count``),
``--episodes`` greedy episodes each, reset seeds drawn from ``--seed`` (not the run's). It
prints, per run folder and model, the mean return, the worst variant's mean and how many
variants fall below the target.

    python simulations/replay.py RUN_DIR [RUN_DIR ...] [--episodes 5] [--seed 12345] [--target 475]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from fedrl.config import from_run_config
from fedrl.envs.batched import make_batched_env
from fedrl.experiment import variants_of
from fedrl.rl.rollout import to_env_actions
from fedrl.runfolder.export import load_policy


def replay(run_dir: Path, which: str, episodes: int, seed: int) -> np.ndarray:
    """Per-variant mean return ``[nodes]`` of the run's ``which`` policy (``final`` or ``best``)."""
    cfg = from_run_config(json.loads((run_dir / "config.json").read_text())["run_config"])
    policy, _ = load_policy(run_dir, which)
    variants = variants_of(cfg)
    params = [dict(v) for v in variants for _ in range(episodes)]
    envs = make_batched_env(cfg.env.id, params, {})
    rng = np.random.default_rng(seed)
    obs, _ = envs.reset(seed=[int(s) for s in rng.integers(0, 2**31 - 1, len(params))])
    totals = np.zeros(len(params))
    running = np.ones(len(params), bool)
    try:
        while running.any():
            with torch.inference_mode():
                act = policy(torch.as_tensor(obs, dtype=torch.float32)).numpy()
            obs, reward, term, trunc, _ = envs.step(to_env_actions(act, envs.single_action_space))
            totals += np.where(running, reward, 0.0)
            running &= ~np.logical_or(term, trunc)
    finally:
        envs.close()
    return totals.reshape(len(variants), episodes).mean(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--episodes", type=int, default=5)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--target", type=float, default=475.0)
    args = ap.parse_args()
    print(f"{'run':<40} {'model':<6} {'variants':>8} {'mean':>7} {'worst':>7} {'below':>6}")
    for run in args.runs:
        for which in ("final", "best"):
            if which == "best" and not (run / "best_model.npz").exists():
                continue
            per_variant = replay(run, which, args.episodes, args.seed)
            below = int((per_variant < args.target).sum())
            print(f"{run.name:<40} {which:<6} {per_variant.size:>8} {per_variant.mean():>7.1f} "
                  f"{per_variant.min():>7.1f} {below:>6}", flush=True)


if __name__ == "__main__":
    main()
