"""The run folder: config.json, metrics.jsonl, summary.json, the final and best models, plots.

Layout and keys are a contract (DESIGN.md, "Contracts that outside checks use").
``metrics.jsonl`` has one object per completed round; on resume, rows past the checkpointed
round are dropped first, so every round is recorded exactly once. A torn last line (what a kill
during an append leaves) is skipped with a warning and dropped by that rewrite; a bad line before
it is a ``RunFileError`` naming the file and the line. Whole-file writes go through
``fedrl.storage.atomic`` (never torn, never through a planted symlink).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fedrl.errors import RunFileError
from fedrl.runfolder.best import Best
from fedrl.storage.atomic import PUBLIC, write_text, write_with

log = logging.getLogger("fedrl")

METRICS, SUMMARY, CONFIG, MODEL = "metrics.jsonl", "summary.json", "config.json", "model.npz"
BEST_MODEL = "best_model.npz"  # the best model by evaluation (fedrl.runfolder.best), in model.npz's format


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf become null, numpy scalars become Python numbers."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path: Path, obj: Any) -> None:
    """``obj`` as indented JSON (NaN/inf as null), written atomically."""
    write_text(path, json.dumps(_clean(obj), indent=2) + "\n", PUBLIC)


def parse_metrics(path: Path, text: str) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl`` text: JSON objects with an integer ``round``.

    A last line that is not one (torn by a kill mid-append) is skipped with a warning.

    Raises:
        RunFileError: naming ``path`` and the line, for a bad line before the last.
    """
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    rows: list[dict[str, Any]] = []
    for k, (n, line) in enumerate(lines):
        try:
            row = json.loads(line)
            ok = isinstance(row, dict) and type(row.get("round")) is int
        except ValueError:
            ok = False
        if ok:
            rows.append(row)
        elif k == len(lines) - 1:
            log.warning("%s: line %d is torn (a write cut short); skipping it", path, n)
        else:
            raise RunFileError(path, f"line {n}", "not a metrics row (a JSON object with an integer round); "
                                                  "repair or remove that line")
    return rows


MAX_CURVES = 16  # variants drawn one line each in the PNG curves


class RunFolder:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.best: Best | None = None  # the evaluation best_model.npz holds (restored on resume)
        self.listeners: list[Callable[[dict[str, Any]], None]] = []  # told each row after it is on disk
        self.closers: list[Callable[[], None]] = []  # close()

    def write_config(self, resolved: dict[str, Any]) -> None:
        write_json(self.path / CONFIG, resolved)

    def read_metrics(self) -> list[dict[str, Any]]:
        f = self.path / METRICS
        if not f.exists():
            return []
        return parse_metrics(f, f.read_text(errors="replace"))

    def truncate_metrics(self, last_round: int) -> None:
        """Keep rows with round <= last_round (used on resume); the rewrite drops a torn last line."""
        rows = [r for r in self.read_metrics() if r["round"] <= last_round]
        write_text(self.path / METRICS, "".join(json.dumps(r) + "\n" for r in rows), PUBLIC)

    def append_metrics(self, row: dict[str, Any]) -> None:
        """One row, one ``write`` of a whole line, fsync-ed; a symlink at ``metrics.jsonl`` is refused."""
        fd = os.open(self.path / METRICS, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), PUBLIC)
        with os.fdopen(fd, "a") as fh:
            fh.write(json.dumps(_clean(row)) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        for listen in self.listeners:  # e.g. log.tensorboard (fedrl.runfolder.tensorboard_log)
            listen(_clean(row))

    def close(self) -> None:
        """Close what listens to the rows (``log.tensorboard``'s writers); the folder stays usable."""
        for close in self.closers:
            close()
        self.listeners, self.closers = [], []

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json(self.path / SUMMARY, summary)

    def save_model(self, names: list[str], weights: list[np.ndarray], extra: dict[str, np.ndarray],
                   file: str = MODEL) -> Path:
        """A policy as ``.npz`` of named float32 arrays (load with allow_pickle=False): the final one
        (``model.npz``) or the best one (``best_model.npz``), written atomically."""
        arrays = {f"policy/{n}": w for n, w in zip(names, weights, strict=True)} | extra
        return write_with(self.path / file, lambda fh: np.savez(fh, **arrays), PUBLIC)  # type: ignore[arg-type]

    def plot(self, variant_labels: list[str]) -> list[Path]:
        """PNG learning curves: eval return per variant against round and against env steps (more
        than ``MAX_CURVES`` variants: their median, worst and min-max band)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        rows = [r for r in self.read_metrics() if r.get("eval_returns")]
        if not rows:
            return []
        out = []
        curves = np.array([[np.nan if v is None else v for v in r["eval_returns"]] for r in rows], float)
        for xkey, xlabel, name in (("round", "round", "eval_vs_round.png"), ("env_steps", "env steps (all nodes)", "eval_vs_env_steps.png")):
            x = [r[xkey] for r in rows]
            fig, ax = plt.subplots(figsize=(7, 4.5))
            if curves.shape[1] <= MAX_CURVES:
                for j in range(curves.shape[1]):
                    ax.plot(x, curves[:, j], label=variant_labels[j] if j < len(variant_labels) else f"variant {j}",
                            lw=1.2)
            else:  # a large federation: one line per variant (and a legend of them) would be unreadable and slow
                ax.fill_between(x, np.nanmin(curves, 1), np.nanmax(curves, 1), alpha=0.25,
                                label=f"min-max of {curves.shape[1]} variants")
                ax.plot(x, np.nanmedian(curves, 1), lw=1.5, label="median")
                ax.plot(x, np.nanmin(curves, 1), lw=1.0, label="worst variant")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("eval return")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, ncol=2)
            fig.tight_layout()
            fig.savefig(self.path / name, dpi=90)
            plt.close(fig)
            out.append(self.path / name)
        return out
