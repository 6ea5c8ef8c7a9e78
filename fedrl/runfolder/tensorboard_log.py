"""Live curves: each metrics row as TensorBoard scalars in the run folder (``log.tensorboard``).

CleanRL, Stable-Baselines3, RLlib and TorchRL all log to TensorBoard, so users watch a run and
overlay runs there. The server writes the event files (``<run folder>/tensorboard/``) with
``torch.utils.tensorboard.SummaryWriter``; nodes send nothing for it. ``scalars`` turns one
``metrics.jsonl`` row into the series, so the event files hold exactly the rows' values:

- every number of the row, under its own name (``eval_min_return``, ``epsilon``, ``bytes_up``,
  ``round_time_s``, ...); booleans, strings and nulls are skipped;
- per-variant lists (``eval_returns``, ``heldout_returns``) as ``<field>/<index>``;
- the nodes trained and failed as counts (``nodes_trained``, ``nodes_failed``);
- per-node maps (``train_returns``, ``train_seconds``, ...; keys are node ids) as their
  ``/mean``, ``/min`` and ``/max`` over the nodes that reported a number;
- other maps of numbers (``secagg_seconds``) as ``<field>/<key>``.

Each series is written twice: against the round (``tensorboard/``) and against env steps
(``tensorboard/env_steps/``, a second TensorBoard run of the same tags, so a resumed run can
purge each axis at its own step). The flat run config goes in as hyperparameters. TensorBoard is an
optional extra (``pip install -e ".[tensorboard]"``); this module is imported by the server only.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedrl.errors import ConfigError

FOLDER = "tensorboard"
PER_VARIANT = ("eval_returns", "heldout_returns")
COUNTED = ("nodes_trained", "nodes_failed")
BY_ENV_STEPS = "env_steps"  # subfolder of FOLDER


def require() -> None:
    """Raise ``ConfigError`` naming ``log.tensorboard`` unless TensorBoard can be imported (no import here)."""
    if importlib.util.find_spec("tensorboard") is None:
        raise ConfigError("log.tensorboard", "is true but TensorBoard is not installed; install the extra with "
                                             "pip install -e \".[tensorboard]\", or set log.tensorboard = false")


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The TensorBoard series of one metrics row (see the module docstring), by tag."""
    out: dict[str, float] = {}
    for key, v in row.items():
        if key in COUNTED and isinstance(v, (list, dict)):
            out[key] = float(len(v))
        elif key in PER_VARIANT and isinstance(v, list):
            out |= {f"{key}/{i}": x for i, x in enumerate(map(_number, v)) if x is not None}
        elif isinstance(v, dict):
            nums = {str(k): x for k, x in ((k, _number(x)) for k, x in v.items()) if x is not None}
            if nums and all(k.isdigit() for k in v):  # one value per node: summarized
                vals = list(nums.values())
                out |= {f"{key}/mean": math.fsum(vals) / len(vals), f"{key}/min": min(vals), f"{key}/max": max(vals)}
            else:
                out |= {f"{key}/{k}": x for k, x in nums.items()}
        elif (x := _number(v)) is not None:
            out[key] = x
    return out


def _hparam(v: Any) -> int | float | str | bool:
    return v if isinstance(v, (int, float, str, bool)) else str(v)


class TensorBoardLog:
    """One run's event files. On resume (``done_rounds`` > 0), events after the checkpoint
    (``done_rounds``, ``done_env_steps``) that a killed run had written are purged (TensorBoard's
    ``purge_step``), so the curves hold each round once."""

    def __init__(self, run_folder: Path, run_config: Mapping[str, Any], done_rounds: int = 0,
                 done_env_steps: int = 0) -> None:
        require()
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        resumed = done_rounds > 0
        self.by_round = SummaryWriter(str(run_folder / FOLDER), purge_step=done_rounds + 1 if resumed else None)
        self.by_steps = SummaryWriter(str(run_folder / FOLDER / BY_ENV_STEPS),
                                      purge_step=done_env_steps + 1 if resumed else None)
        if not resumed:  # the config is written once, with the run's first events
            exp, ssi, sei = hparams({k: _hparam(v) for k, v in run_config.items()}, {"eval_min_return": math.nan})
            for summary in (exp, ssi, sei):
                self.by_round._get_file_writer().add_summary(summary)  # as SummaryWriter.add_hparams does, in this run

    def write(self, row: Mapping[str, Any]) -> None:
        """Add one metrics row's series against its round and its env steps, and flush (live curves)."""
        rnd, steps = int(row["round"]), int(row.get("env_steps", 0))
        for tag, value in scalars(row).items():
            self.by_round.add_scalar(tag, value, rnd)
            self.by_steps.add_scalar(tag, value, steps)
        self.by_round.flush()
        self.by_steps.flush()

    def close(self) -> None:
        self.by_round.close()
        self.by_steps.close()
