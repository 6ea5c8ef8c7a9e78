"""Run-folder lifecycle shared by every engine: create or resume, progress lines, finish.

``finish`` writes summary.json (keys fixed by DESIGN.md), the final model (``model.npz``),
the PNG learning curves and prints the per-variant table.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedrl import checkpoint
from fedrl.errors import ConfigError
from fedrl.federation import Federation
from fedrl.privacy.node import dpsgd_field
from fedrl.results import RunFolder
from fedrl.snapshot import restore, snapshot

log = logging.getLogger("fedrl")


def resolve_run_folder(fed: Federation) -> RunFolder:
    """Create a new run folder for ``fed.cfg``, or reopen one and restore ``fed`` from its checkpoint."""
    cfg = fed.cfg
    out = Path(cfg.output_dir).expanduser().resolve()
    if cfg.resume and cfg.resume != "true":
        path = Path(cfg.resume).expanduser().resolve()
    else:
        name = cfg.run_name or f"{cfg.env.id}-{cfg.strategy.name}-{dt.datetime.now():%Y%m%d-%H%M%S}"
        path = out / name
    ck = checkpoint.load(path)
    if cfg.resume:
        if ck is None:
            raise ConfigError("resume", f"no checkpoint in {path}; nothing to resume")
        restore(fed, ck, path / checkpoint.FILE)  # checks it fits the config before metrics are touched
        folder = RunFolder(path)
        folder.truncate_metrics(fed.round)
        print(f"fedrl: resuming {path} after round {fed.round}", flush=True)
        return folder
    if ck is not None:
        raise ConfigError("run-name", f"{path} already holds a run; pick another run-name or set resume=true")
    folder = RunFolder(path)
    folder.write_config(fed.resolved_config())
    print(f"fedrl: writing results to {path}", flush=True)
    return folder


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def round_line(row: dict[str, Any], total: int) -> str:
    ev = ""
    if "eval_mean_return" in row:
        ev = f" | eval mean {row['eval_mean_return']:8.1f} min {row['eval_min_return']:8.1f}"
    tail = f" | {len(row['nodes_failed'])} left out" if row.get("nodes_failed") else ""
    if row.get("epsilon") is not None:
        tail += f" | ε {row['epsilon']:.2f}"
    return (f"round {row['round']:>4}/{total}{ev} | env steps {row['env_steps']:>9,} | up {_mb(row['bytes_up'])}"
            f" down {_mb(row['bytes_down'])} | {row['round_time_s']:.1f} s{tail}")


def end_round(fed: Federation, folder: RunFolder, started: float, round_started: float, fields: dict[str, Any]) -> bool:
    """Evaluate if due, record the round (metrics row, checkpoint, progress line); return
    True when the run should stop early (``eval.stop-at-target`` and every variant solved)."""
    cfg = fed.cfg
    rnd = fed.round
    due = rnd == cfg.num_server_rounds or (cfg.eval.every > 0 and rnd % cfg.eval.every == 0)
    evals = fed.evaluate_own() if due else []
    row: dict[str, Any] = {
        "round": rnd, "wall_time_s": fed.wall_time_s + time.time() - started,
        "round_time_s": time.time() - round_started, "env_steps": fed.env_steps,
        "bytes_up": fed.bytes_up, "bytes_down": fed.bytes_down, **fields,
    }
    if fed.hier:
        row["bytes_cloud"] = fed.bytes_cloud  # the edge <-> cloud tier; bytes_up/down are node <-> edge
    if fed.gossip is not None:
        row["consensus_distance"] = fed.consensus_distance()
    if evals:
        row |= {"eval_returns": evals, "eval_mean_return": sum(evals) / len(evals), "eval_min_return": min(evals)}
    folder.append_metrics(row)
    checkpoint.save(folder.path, snapshot(fed, started))
    print(round_line(row, cfg.num_server_rounds), flush=True)
    if evals and cfg.eval.stop_at_target and fed.solved(evals):
        print(f"every variant reached the target return {fed.target}: stopping", flush=True)
        return True
    return False


def _last_eval(rows: list[dict[str, Any]]) -> list[float] | None:
    evals = [r for r in rows if r.get("eval_returns")]
    return evals[-1]["eval_returns"] if evals else None


def finish(fed: Federation, folder: RunFolder) -> dict[str, Any]:
    rows = folder.read_metrics()
    returns = _last_eval(rows)
    if returns is None or len(returns) != len(fed.variants):
        returns = fed.evaluate_own()
    summary: dict[str, Any] = {
        "rounds_completed": fed.round,
        "env_steps_total": fed.env_steps,
        "wall_time_s": fed.wall_time_s,
        "bytes_up_total": fed.bytes_up,
        "bytes_down_total": fed.bytes_down,
        **({"bytes_cloud_total": fed.bytes_cloud} if fed.hier else {}),
        "eval": [{"node": i, "params": v, "mean_return": r} for i, (v, r) in enumerate(zip(fed.variants, returns, strict=True))],
        "eval_mean_return": float(np.mean(returns)),
        "eval_min_return": float(np.min(returns)),
        "target_return": fed.target,
        "solved": fed.solved(returns),
        "strategy": fed.cfg.strategy.name,
        "epsilon": fed.epsilon(),
        "delta": fed.privacy.delta if fed.privacy is not None else None,
        "noise_multiplier": fed.privacy.z if fed.privacy is not None else None,
    }
    summary |= dpsgd_field(rows)  # sample-level ε of the node that spent the most
    audit = fed.audit_result()
    if audit is not None:
        summary["audit"] = audit.to_dict()
        if fed.privacy is not None and fed.privacy.no_noise:
            summary["audit"]["unsafe_no_noise"] = True  # the run's ε is false: no noise was added
        (log.warning if audit.flagged else log.info)(audit.line())
        print(audit.line(), flush=True)
    if fed.per_node:
        cross = fed.evaluate_cross()
        summary["eval_cross"] = cross  # row i: node i's own model on every variant
        summary["eval_cross_mean_return"] = float(np.mean(cross))
        summary["eval_cross_worst_node"] = float(np.min(np.mean(cross, axis=1)))  # the worst node, over all variants
    if fed.gossip is not None:
        summary["consensus_distance"] = fed.consensus_distance()
    folder.write_summary(summary)
    extra = {"obs_moments": fed.moments[0].to_array()} if fed.moments[0] is not None else {}
    if fed.per_node:
        for i, w in enumerate(fed.node_models()):
            extra |= {f"node{i}/{n}": a for n, a in zip(fed.names, w, strict=True)}
    folder.save_model(fed.names, fed.server_model(), extra)
    labels = [", ".join(f"{k}={v:.3g}" for k, v in p.items()) or f"node {i}" for i, p in enumerate(fed.variants)]
    folder.plot(labels)
    print_table(summary)
    return summary


def print_table(summary: dict[str, Any]) -> None:
    print(f"\n{'node':>4}  {'variant':<40} {'return':>9}")
    for e in summary["eval"]:
        params = ", ".join(f"{k}={v:.4g}" for k, v in e["params"].items()) or "(default)"
        print(f"{e['node']:>4}  {params:<40} {e['mean_return']:9.1f}")
    print(f"mean {summary['eval_mean_return']:.1f}  min {summary['eval_min_return']:.1f}  "
          f"env steps {summary['env_steps_total']:,}  wall {summary['wall_time_s']:.1f} s", flush=True)
