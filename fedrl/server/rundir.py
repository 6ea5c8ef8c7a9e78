"""Run-folder lifecycle shared by every engine: create or resume, progress lines, finish.

``finish`` writes summary.json (keys fixed by DESIGN.md), the final model (``model.npz``),
the PNG learning curves and prints the per-variant table. Every evaluation (``end_round``'s and
the final one in ``finish``) may replace the best model, ``best_model.npz`` (``fedrl.runfolder.best``).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedrl.config import to_flat
from fedrl.errors import ConfigError
from fedrl.privacy.node import dpsgd_field
from fedrl.runfolder.best import Best, improves, last_evals_min, table_line
from fedrl.runfolder.results import BEST_MODEL, RunFolder
from fedrl.server import heldout
from fedrl.server.federation import Federation
from fedrl.server.snapshot import best_of, restore, snapshot
from fedrl.storage import checkpoint

log = logging.getLogger("fedrl")


def resolve_run_folder(fed: Federation) -> RunFolder:
    """Create a new run folder for ``fed.cfg``, or reopen one and restore ``fed`` from its checkpoint;
    with ``log.tensorboard`` the folder's rows also go to TensorBoard (``fedrl.runfolder.tensorboard_log``)."""
    folder = _open_folder(fed)
    if fed.cfg.log.tensorboard:
        from fedrl.runfolder.tensorboard_log import TensorBoardLog

        board = TensorBoardLog(folder.path, to_flat(fed.cfg), fed.round, fed.counters.env_steps)
        folder.listeners.append(board.write)
        folder.closers.append(board.close)
    return folder


def _open_folder(fed: Federation) -> RunFolder:
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
        best = best_of(ck, path / checkpoint.FILE)
        folder = RunFolder(path)
        folder.best = best  # a worse evaluation after resume does not replace best_model.npz
        folder.truncate_metrics(fed.round)
        print(f"fedrl: resuming {path} after round {fed.round}", flush=True)
        return folder
    if ck is not None:
        raise ConfigError("run-name", f"{path} already holds a run; pick another run-name or set resume=true")
    folder = RunFolder(path)
    folder.write_config(resolved_config(fed))
    print(f"fedrl: writing results to {path}", flush=True)
    return folder


def resolved_config(fed: Federation) -> dict[str, Any]:
    """The run's config.json: the flat run config and what it resolved to (each node's variant,
    the evaluated nodes, held-out variants, the policy's shape and weight names, the target)."""
    return {
        "run_config": to_flat(fed.cfg),
        "nodes": [{"node": i, "params": v} for i, v in enumerate(fed.variants)],
        "eval_nodes": fed.evaluation.nodes,  # whose variants the server evaluates (eval.nodes)
        **({"heldout": [{"index": j, "params": v} for j, v in enumerate(fed.heldout)]} if fed.heldout else {}),
        "policy": {"obs_dim": fed.spec.obs_dim, "action_kind": fed.spec.action_kind,
                   "action_dim": fed.spec.action_dim, "hidden": list(fed.spec.hidden),
                   # the bounds SAC's squashed actions scale to (the first node's env, as the server evaluates)
                   "action_low": list(fed.spec.action_low), "action_high": list(fed.spec.action_high),
                   # algo.mirror: the symmetry the policy is built with (fedrl.envs.symmetry); [] = none
                   "obs_mirror": list(fed.spec.obs_mirror), "action_mirror": list(fed.spec.action_mirror),
                   "weight_names": fed.names},
        "target_return": fed.target,
    }


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def round_line(row: dict[str, Any], total: int) -> str:
    ev = ""
    if "eval_mean_return" in row:
        ev = f" | eval mean {row['eval_mean_return']:8.1f} min {row['eval_min_return']:8.1f}"
    if "heldout_mean_return" in row:
        ev += f" | held-out mean {row['heldout_mean_return']:8.1f} min {row['heldout_min_return']:8.1f}"
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
        "round": rnd, "wall_time_s": fed.counters.wall_time_s + time.time() - started,
        "round_time_s": time.time() - round_started, "env_steps": fed.counters.env_steps,
        "bytes_up": fed.counters.bytes_up, "bytes_down": fed.counters.bytes_down, **fields,
    }
    row |= fed.rule.row_fields(rnd)  # hierarchical: bytes_cloud; gossip: consensus_distance
    if evals:
        row |= {"eval_returns": evals, "eval_mean_return": sum(evals) / len(evals), "eval_min_return": min(evals)}
        row |= heldout.row_fields(fed.evaluate_heldout())  # {} unless eval.held-out > 0
        keep_best(fed, folder, evals)
    folder.append_metrics(row)
    checkpoint.save(folder.path, snapshot(fed, started, folder.best))
    print(round_line(row, cfg.num_server_rounds), flush=True)
    if evals and cfg.eval.stop_at_target and fed.solved(evals):
        print(f"every variant reached the target return {fed.target}: stopping", flush=True)
        return True
    return False


def budget_stop(fed: Federation, rnd: int) -> str | None:
    """Why the run must stop before round (or server step) ``rnd``: one more release would take ε
    above the budget (``privacy.target-epsilon``); None when it may go on."""
    if fed.budget_allows_next_round():
        return None
    assert fed.privacy is not None and fed.dp is not None
    return (f"privacy budget: round {rnd} would take ε from {fed.epsilon():.3f} to "
            f"{fed.dp.ledger.epsilon(fed.privacy.next_round_cost()):.3f} > {fed.privacy.budget:g} "
            f"(δ = {fed.privacy.delta:g}); stopping after round {rnd - 1} with its model and results")


def stops_for_budget(fed: Federation, rnd: int) -> bool:
    """``budget_stop``, said in the log and on the console when the run must stop."""
    if (why := budget_stop(fed, rnd)) is None:
        return False
    log.warning(why)
    print(why, flush=True)
    return True


def model_arrays(fed: Federation) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """What ``model.npz`` and ``best_model.npz`` hold: the server model's weights, and the extra
    arrays (observation statistics; every node's model as ``node{i}/<name>`` for local and gossip)."""
    extra = {"obs_moments": fed.moments[0].to_array()} if fed.moments[0] is not None else {}
    if fed.per_node:
        for i, w in enumerate(fed.node_models()):
            extra |= {f"node{i}/{n}": a for n, a in zip(fed.names, w, strict=True)}
    return fed.server_model(), extra


def keep_best(fed: Federation, folder: RunFolder, returns: list[float]) -> bool:
    """If ``returns`` (this round's evaluation, per variant) beat ``folder.best``, write the current
    model to ``best_model.npz`` and record it as the best; return whether it did."""
    if not improves(returns, folder.best):
        return False
    folder.save_model(fed.names, *model_arrays(fed), file=BEST_MODEL)
    folder.best = Best.of(fed.round, returns)
    return True


def _evaluations(rows: list[dict[str, Any]]) -> list[tuple[int, list[float]]]:
    """(round, per-variant returns) of every row that evaluated, oldest first."""
    return [(r["round"], r["eval_returns"]) for r in rows if r.get("eval_returns")]


def finish(fed: Federation, folder: RunFolder) -> dict[str, Any]:
    rows = folder.read_metrics()
    evals = _evaluations(rows)
    nodes = fed.evaluation.nodes  # eval.nodes: whose variants were evaluated
    if evals and evals[-1][0] == fed.round and len(evals[-1][1]) == len(nodes):
        returns = evals[-1][1]
    else:  # the run stopped after a round that did not evaluate: the final model is evaluated now
        returns = fed.evaluate_own()
        keep_best(fed, folder, returns)
        evals.append((fed.round, returns))
    best = folder.best
    summary: dict[str, Any] = {
        "rounds_completed": fed.round,
        "env_steps_total": fed.counters.env_steps,
        "wall_time_s": fed.counters.wall_time_s,
        "bytes_up_total": fed.counters.bytes_up,
        "bytes_down_total": fed.counters.bytes_down,
        "eval": [{"node": i, "params": fed.variants[i], "mean_return": r} for i, r in zip(nodes, returns, strict=True)],
        "eval_mean_return": float(np.mean(returns)),
        "eval_min_return": float(np.min(returns)),
        "target_return": fed.target,
        "solved": fed.solved(returns),
        "best_round": best.round if best is not None else None,
        "best_eval_min_return": best.min_return if best is not None else None,
        "best_eval_mean_return": best.mean_return if best is not None else None,
        "last_evals_min_return": last_evals_min([ev for _, ev in evals]),
        "strategy": fed.cfg.strategy.name,
        "epsilon": fed.epsilon(),
        "delta": fed.privacy.delta if fed.privacy is not None else None,
        "noise_multiplier": fed.privacy.z if fed.privacy is not None else None,
    }
    summary |= dpsgd_field(rows)  # sample-level ε of the node that spent the most
    summary |= heldout.summary_fields(fed.heldout, rows, fed.round, fed.evaluate_heldout)  # {} unless eval.held-out > 0
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
    summary |= fed.rule.summary_fields(fed.round)  # hierarchical: bytes_cloud_total; gossip: consensus_distance
    folder.write_summary(summary)
    folder.save_model(fed.names, *model_arrays(fed))
    labels = [", ".join(f"{k}={v:.3g}" for k, v in fed.variants[i].items()) or f"node {i}" for i in nodes]
    folder.plot(labels)
    folder.close()
    print_table(summary)
    return summary


def print_table(summary: dict[str, Any]) -> None:
    print(f"\n{'node':>4}  {'variant':<40} {'return':>9}")
    for e in summary["eval"]:
        params = ", ".join(f"{k}={v:.4g}" for k, v in e["params"].items()) or "(default)"
        print(f"{e['node']:>4}  {params:<40} {e['mean_return']:9.1f}")
    for h in summary.get("heldout", []):  # eval.held-out: variants no node trained on
        params = ", ".join(f"{k}={v:.4g}" for k, v in h["params"].items())
        print(f"{'h' + str(h['index']):>4}  {params:<40} {h['mean_return']:9.1f}")
    print(f"mean {summary['eval_mean_return']:.1f}  min {summary['eval_min_return']:.1f}  "
          f"env steps {summary['env_steps_total']:,}  wall {summary['wall_time_s']:.1f} s", flush=True)
    print(table_line(summary), flush=True)
