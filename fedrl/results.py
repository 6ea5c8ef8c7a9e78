"""The run folder: config.json, metrics.jsonl, summary.json, the final model and plots.

Layout and keys are a contract (DESIGN.md, "Contracts that outside checks use").
``metrics.jsonl`` has one object per completed round; on resume, rows past the checkpointed
round are dropped first, so every round is recorded exactly once.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

METRICS, SUMMARY, CONFIG, MODEL = "metrics.jsonl", "summary.json", "config.json", "model.npz"


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
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(_clean(obj), indent=2) + "\n")
    os.replace(tmp, path)


class RunFolder:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def write_config(self, resolved: dict[str, Any]) -> None:
        write_json(self.path / CONFIG, resolved)

    def read_metrics(self) -> list[dict[str, Any]]:
        f = self.path / METRICS
        if not f.exists():
            return []
        return [json.loads(line) for line in f.read_text().splitlines() if line.strip()]

    def truncate_metrics(self, last_round: int) -> None:
        """Keep rows with round <= last_round (used on resume)."""
        rows = [r for r in self.read_metrics() if r["round"] <= last_round]
        tmp = self.path / (METRICS + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, self.path / METRICS)

    def append_metrics(self, row: dict[str, Any]) -> None:
        with open(self.path / METRICS, "a") as fh:
            fh.write(json.dumps(_clean(row)) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json(self.path / SUMMARY, summary)

    def save_model(self, names: list[str], weights: list[np.ndarray], extra: dict[str, np.ndarray]) -> Path:
        """The final policy as ``.npz`` of named float32 arrays (load with allow_pickle=False)."""
        path = self.path / MODEL
        tmp = self.path / (MODEL + ".tmp")
        with open(tmp, "wb") as fh:
            np.savez(fh, **{f"policy/{n}": w for n, w in zip(names, weights, strict=True)}, **extra)  # type: ignore[arg-type]
        os.replace(tmp, path)
        return path

    def plot(self, variant_labels: list[str]) -> list[Path]:
        """PNG learning curves: eval return per variant against round and against env steps."""
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
            for j in range(curves.shape[1]):
                ax.plot(x, curves[:, j], label=variant_labels[j] if j < len(variant_labels) else f"variant {j}", lw=1.2)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("eval return")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, ncol=2)
            fig.tight_layout()
            fig.savefig(self.path / name, dpi=90)
            plt.close(fig)
            out.append(self.path / name)
        return out
