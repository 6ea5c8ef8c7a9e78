"""``fedrl compare``: runs side by side, grouped by everything but their seed.

Every question a user asks of fedrl (FedAvg or FedProx? ε = 2 or 8? which compressor?) is
answered by several runs over several seeds. This reads run folders (``config.json`` and
``metrics.jsonl`` only, so a run that stopped early counts with the rounds it finished), groups
the runs whose run configs differ only in ``seed`` (and where they live), and gives per group:

- a curve: the median over the group's seeds of one metric (default ``eval_min_return``, the
  worst variant) and its min-max band, against ``round``, ``env_steps`` or ``wall_time_s``. A
  seed's curve is interpolated linearly onto the union of the group's x values, and counts only
  inside its own x range (a run that stopped early leaves the band where it stopped);
- a table row: the number of seeds and, as median [min..max] over them, the metric's final and
  best values, the env steps at which the worst variant first reached the run's target return
  (``target_return`` in config.json; "k never" counts seeds that did not), the final ε and the
  final megabytes up and down.

Groups are labelled by the run-config keys in which groups differ. Plain Python and matplotlib:
nothing here needs pandas, and the runs' files are the only input.
"""

from __future__ import annotations

import json
import math
import statistics
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedrl.config import LOCATION_KEYS
from fedrl.errors import ConfigError, RunFileError
from fedrl.runfolder.results import CONFIG, METRICS, parse_metrics

X_AXES = ("env_steps", "round", "wall_time_s")
NOT_THE_EXPERIMENT = LOCATION_KEYS | {"seed"}  # runs that differ only here are seeds of one group


@dataclass(frozen=True)
class Run:
    path: Path
    config: dict[str, Any]  # the flat run config
    rows: list[dict[str, Any]]
    target: float | None

    def series(self, metric: str, x: str) -> tuple[np.ndarray, np.ndarray]:
        """(x, metric) over the rows that carry a number for ``metric``, in row order."""
        pts = [(r[x], r[metric]) for r in self.rows if _num(r.get(metric)) and _num(r.get(x))]
        return np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float)

    def last(self, key: str) -> float | None:
        """The last row's number for ``key`` (None: no row has one)."""
        vals = [r[key] for r in self.rows if _num(r.get(key))]
        return float(vals[-1]) if vals else None

    def steps_to_target(self) -> float | None:
        """Env steps of the first row whose worst variant reached the target (None: never, or no target)."""
        if self.target is None:
            return None
        hit = next((r for r in self.rows if _num(r.get("eval_min_return")) and r["eval_min_return"] >= self.target),
                   None)
        return float(hit["env_steps"]) if hit is not None else None


@dataclass
class Group:
    key: tuple[tuple[str, str], ...]  # the run config without seed and location, as sorted (key, json) pairs
    runs: list[Run] = field(default_factory=list)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def read_run(path: Path) -> Run:
    """A run folder's config and rows. Raises ``ConfigError`` naming the folder when it is not one."""
    if not (path / METRICS).is_file():
        raise ConfigError("RUN_DIR", f"{path} has no {METRICS}: not a run folder (or a run that never finished a round)")
    try:
        resolved = json.loads((path / CONFIG).read_text())
        config = resolved["run_config"]
        if not isinstance(config, dict):
            raise TypeError("run_config is not an object")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError("RUN_DIR", f"{path / CONFIG} is missing or unreadable ({err})") from None
    try:
        rows = parse_metrics(path / METRICS, (path / METRICS).read_text(errors="replace"))
    except RunFileError as err:
        raise ConfigError("RUN_DIR", str(err)) from None
    if not rows:
        raise ConfigError("RUN_DIR", f"{path / METRICS} has no rows")
    target = resolved.get("target_return")
    return Run(path, config, rows, float(target) if _num(target) else None)


def find_runs(paths: Sequence[Path]) -> list[Run]:
    """The runs named: each path is a run folder, or a folder of run folders (a sweep's ``runs/``)."""
    if not paths:
        raise ConfigError("RUN_DIR", "name at least one run folder (or a folder of run folders)")
    runs: list[Run] = []
    for p in paths:
        if not p.is_dir():
            raise ConfigError("RUN_DIR", f"{p} is not a folder")
        inner = sorted(d for d in p.iterdir() if d.is_dir() and (d / METRICS).is_file())
        runs += [read_run(d) for d in inner] if not (p / METRICS).exists() and inner else [read_run(p)]
    return runs


def group_runs(runs: Sequence[Run]) -> list[Group]:
    """Runs grouped by their run config without seed and location, in the order groups first appear."""
    groups: dict[tuple[tuple[str, str], ...], Group] = {}
    for run in runs:
        key = tuple(sorted((k, json.dumps(v)) for k, v in run.config.items() if k not in NOT_THE_EXPERIMENT))
        groups.setdefault(key, Group(key)).runs.append(run)
    return list(groups.values())


def labels(groups: Sequence[Group]) -> list[str]:
    """Each group's label: its values of the keys in which groups differ (one group: its seed count)."""
    if len(groups) == 1:
        return [f"{len(groups[0].runs)} runs"]
    maps = [dict(g.key) for g in groups]
    keys = sorted({k for m in maps for k in m if len({m_.get(k) for m_ in maps}) > 1})
    return [", ".join(f"{k}={json.loads(m[k]) if k in m else '-'}" for k in keys) for m in maps]


def band(curves: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x, median, min, max) over curves put on the union of their x values; a curve counts only
    inside its own x range."""
    grid = np.unique(np.concatenate([x for x, _ in curves]))
    at = np.full((len(curves), grid.size), np.nan)
    for i, (x, y) in enumerate(curves):
        inside = (grid >= x[0]) & (grid <= x[-1])
        at[i, inside] = np.interp(grid[inside], x, y)
    return grid, np.nanmedian(at, 0), np.nanmin(at, 0), np.nanmax(at, 0)


def spread(values: Sequence[float | None], spec: str = ".1f") -> str:
    """``median [min..max]`` of the values that exist, and how many do not ("k never")."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    text = f"{format(statistics.median(vals), spec)} [{format(min(vals), spec)}..{format(max(vals), spec)}]"
    return text + (f" ({len(values) - len(vals)} never)" if len(vals) < len(values) else "")


def _mb(run: Run) -> float | None:
    up, down = run.last("bytes_up"), run.last("bytes_down")
    return None if up is None or down is None else (up + down) / 1e6


def _best(run: Run, metric: str) -> float | None:
    ys = run.series(metric, "round")[1]
    return float(ys.max()) if ys.size else None


def table(groups: Sequence[Group], names: Sequence[str], metric: str) -> list[str]:
    """One line per group: seeds, final and best ``metric``, steps to target, final ε, MB up+down, and
    the group's label last (labels can be long)."""
    head = (f"{'seeds':>5}  {'final ' + metric:<28} {'best ' + metric:<28} {'env steps to target':<34} "
            f"{'epsilon':<22} {'MB up+down':<24} group")
    lines = [head, "-" * len(head)]
    for g, name in zip(groups, names, strict=True):
        eps = [r.last("epsilon") for r in g.runs]
        lines.append(f"{len(g.runs):>5}  {spread([r.last(metric) for r in g.runs]):<28} "
                     f"{spread([_best(r, metric) for r in g.runs]):<28} "
                     f"{spread([r.steps_to_target() for r in g.runs], ',.0f'):<34} "
                     f"{spread(eps, '.2f') if any(e is not None for e in eps) else '-':<22} "
                     f"{spread([_mb(r) for r in g.runs], ',.1f'):<24} {name}")
    return lines


def plot(groups: Sequence[Group], names: Sequence[str], metric: str, x: str, out: Path) -> Path:
    """Median and min-max band of ``metric`` against ``x``, one colour per group, as a PNG at ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wrapped = [textwrap.fill(f"{name} ({len(g.runs)} seed{'s' * (len(g.runs) > 1)})", 120)
               for g, name in zip(groups, names, strict=True)]
    legend_in = 0.18 * sum(w.count("\n") + 1 for w in wrapped) + 0.3  # the legend goes below the axes
    fig, ax = plt.subplots(figsize=(9, 4.5 + legend_in))
    for g, label in zip(groups, wrapped, strict=True):
        curves = [c for c in (r.series(metric, x) for r in g.runs) if c[0].size]
        if not curves:
            continue
        grid, mid, lo, hi = band(curves)
        (line,) = ax.plot(grid, mid, lw=1.6, label=label)
        ax.fill_between(grid, lo, hi, color=line.get_color(), alpha=0.2)
    ax.set_xlabel({"env_steps": "env steps (all nodes)", "round": "round", "wall_time_s": "wall time (s)"}[x])
    ax.set_ylabel(f"{metric}: median over seeds, min-max band")
    ax.grid(alpha=0.3)
    fig.legend(loc="lower center", fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, legend_in / (4.5 + legend_in), 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def compare(paths: Sequence[Path], metric: str = "eval_min_return", x: str = "env_steps",
            out: Path = Path("compare.png")) -> tuple[list[str], Path]:
    """The table's lines and the PNG written. Raises ``ConfigError`` (one line) on bad arguments."""
    if x not in X_AXES:
        raise ConfigError("--x", f"got {x!r}; allowed: {', '.join(X_AXES)}")
    runs = find_runs(paths)
    if not any(_num(r.get(metric)) for run in runs for r in run.rows):
        known = sorted({k for run in runs for r in run.rows for k, v in r.items() if _num(v)})
        raise ConfigError("--metric", f"{metric!r} is in no run's {METRICS}; numbers there: {', '.join(known)}")
    groups = group_runs(runs)
    names = labels(groups)
    return table(groups, names, metric), plot(groups, names, metric, x, out)
