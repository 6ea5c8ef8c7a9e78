"""Privacy-utility sweep: a grid of runs through Flower's Simulation Engine, one CSV row per run, a plot.

    python simulations/privacy_sweep.py [--config simulations/configs/cartpole_dp.toml]
        [--grid privacy.target-epsilon 1 2 4 8] [--grid seed 0 1 2] [--grid nodes.count 16 32]
        [--set "key=value ..."] [--no-references] [--supernodes 8] [--out simulations/results-privacy]

Every combination of the ``--grid`` values (any run-config key; values as in ``--run-config``,
so strings in quotes: ``--grid algo.hidden "'16'" "'32'"``) is one run of ``fedrl run`` on the
``--config`` preset plus ``--set``. For every combination of the grid keys outside ``privacy.*``
the sweep also runs two references: the same federation without DP (``nonprivate``) and each
node alone (``local``, ``strategy.name = local``).

Output in ``--out``: ``runs/<run>/`` (each run's folder), ``runs.csv`` (one row per finished
run: kind, grid values, ε, δ, noise multiplier, final and best eval mean return, final min
return, rounds, env steps, wall seconds, audit bound if any) and ``privacy_utility.png`` (final
eval mean return against ε: median over the other keys' seeds with min-max bars, one line per
combination of the non-privacy keys, references as horizontal lines).

Restarting with the same arguments skips every run already in ``runs.csv``; a run that was
killed midway resumes from its checkpoint. The run's name is a hash of its settings, so changing
the grid adds runs without redoing old ones.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import BIN, REPO, Flower, _join

from fedrl.storage import atomic

REFERENCE_OFF = ("privacy.mode='off' privacy.target-epsilon=0.0 privacy.noise-multiplier=0.0 "
                 "privacy.adaptive-clip=false privacy.audit-canaries=0 privacy.unsafe-no-noise=false")
FIELDS = ["run", "kind", "epsilon", "delta", "noise_multiplier", "final_mean_return", "best_mean_return",
          "final_min_return", "rounds", "env_steps", "wall_s", "audit_epsilon_lower"]


def preset(path: str) -> str:
    """A run-config TOML preset as a ``k=v`` override string ('' for none)."""
    if not path:
        return ""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Flower depends on tomli
        import tomli as tomllib
    cfg = tomllib.loads(Path(path).read_text())

    def form(v: object) -> str:  # Flower's run-config literals: quoted strings, lowercase booleans
        return f"'{v}'" if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else repr(v)

    return " ".join(f"{k}={form(v)}" for k, v in cfg.items())


def plan_runs(grid: list[tuple[str, list[str]]], references: bool) -> list[dict[str, str]]:
    """Every run of the sweep: ``{'kind': ..., key: value, ...}`` for the grid keys."""
    keys = [k for k, _ in grid]
    runs = [{"kind": "dp", **dict(zip(keys, vals, strict=True))} for vals in itertools.product(*(v for _, v in grid))]
    if references:
        outer = [(k, v) for k, v in grid if not k.startswith("privacy.")]
        for vals in itertools.product(*(v for _, v in outer)):
            base = dict(zip([k for k, _ in outer], vals, strict=True))
            runs += [{"kind": "nonprivate", **base}, {"kind": "local", **base}]
    return runs


def run_name(run: dict[str, str], common: str) -> str:
    key = json.dumps({"run": run, "common": common}, sort_keys=True)
    return f"{run['kind']}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def overrides(run: dict[str, str], common: str) -> str:
    values = " ".join(f"{k}={v}" for k, v in run.items() if k != "kind")
    extra = {"dp": "", "nonprivate": REFERENCE_OFF, "local": f"{REFERENCE_OFF} strategy.name='local'"}[run["kind"]]
    return _join(common, values, extra)


def check_all(runs: list[dict[str, str]], common: str) -> None:
    """Fail before the first run on any grid point fedrl would refuse (naming the key)."""
    from fedrl.checks.validate import check
    from fedrl.cli import resolved_run_config
    from fedrl.errors import ConfigError

    for run in runs:
        try:
            check(resolved_run_config([str(REPO), "--run-config", overrides(run, common)]))
        except ConfigError as err:
            sys.exit(f"privacy_sweep: run {run} is invalid: {err}")


def result_row(folder: Path, run: dict[str, str], wall: float) -> dict[str, object]:
    summary = json.loads((folder / "summary.json").read_text())
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines() if x.strip()]
    evals = [r["eval_mean_return"] for r in rows if r.get("eval_mean_return") is not None]
    return {**run, "run": folder.name, "epsilon": summary.get("epsilon"), "delta": summary.get("delta"),
            "noise_multiplier": summary.get("noise_multiplier"), "final_mean_return": summary["eval_mean_return"],
            "best_mean_return": max(evals) if evals else summary["eval_mean_return"],
            "final_min_return": summary["eval_min_return"], "rounds": summary["rounds_completed"],
            "env_steps": summary["env_steps_total"], "wall_s": round(wall, 1),
            "audit_epsilon_lower": (summary.get("audit") or {}).get("epsilon_lower")}


def read_csv(path: Path, fields: list[str]) -> dict[str, dict[str, object]]:
    if not path.exists():
        return {}
    with path.open() as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != fields:
            sys.exit(f"privacy_sweep: {path} has columns {reader.fieldnames}, this grid needs {fields}; "
                     "use another --out for a different grid")
        return {r["run"]: dict(r) for r in reader}


def write_csv(path: Path, fields: list[str], rows: dict[str, dict]) -> None:
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    for r in rows.values():
        w.writerow({k: "" if r.get(k) is None else r.get(k) for k in fields})
    atomic.write_text(path, buf.getvalue())


def execute(flower: Flower, folder: Path, rc: str, supernodes: int) -> float:
    """Run (or resume) one run in ``folder``; return its wall seconds."""
    resume = ""
    if (folder / "checkpoint.npz").exists():
        resume = " resume='true'"
    elif folder.exists():
        shutil.rmtree(folder)  # started but never checkpointed: start again
    cmd = [str(BIN / "fedrl"), "run", str(REPO), "--run-config",
           f"{rc} output-dir='{folder.parent}' run-name='{folder.name}'{resume}",
           "--federation-config", f"num-supernodes={supernodes} client-resources-num-cpus=1"]
    t0 = time.time()
    res = subprocess.run(cmd, env=flower.env, capture_output=True, text=True, cwd=REPO, check=False)
    if res.returncode != 0 or not (folder / "summary.json").exists():  # flwr run exits 0 on a failed run
        raise RuntimeError(f"{folder.name} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return time.time() - t0


def plot(path: Path, grid: list[tuple[str, list[str]]], rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    group_keys = [k for k, _ in grid if not k.startswith("privacy.") and k != "seed"]
    dp_key = next((k for k, _ in grid if k.startswith("privacy.")), None)

    def group(r: dict) -> str:
        return ", ".join(f"{k}={r[k]}" for k in group_keys) or "all"

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4)
    for g in sorted({group(r) for r in rows}):
        color = next(colors)
        dp = [r for r in rows if r["kind"] == "dp" and group(r) == g and r["epsilon"] not in ("", None)]
        points = sorted({r[dp_key] for r in dp}, key=float) if dp_key else []
        xs, ys, lo, hi = [], [], [], []
        for p in points:
            cell = [r for r in dp if r[dp_key] == p]
            ret = [float(r["final_mean_return"]) for r in cell]
            xs.append(statistics.median(float(r["epsilon"]) for r in cell))
            ys.append(statistics.median(ret))
            lo.append(ys[-1] - min(ret))
            hi.append(max(ret) - ys[-1])
        if xs:
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, color=color, label=f"DP ({g})")
        for kind, style in (("nonprivate", "--"), ("local", ":")):
            ref = [float(r["final_mean_return"]) for r in rows if r["kind"] == kind and group(r) == g]
            if ref:
                ax.axhline(statistics.median(ref), ls=style, color=color, lw=1,
                           label=f"{'no DP' if kind == 'nonprivate' else 'local only'} ({g})")
    ax.set_xscale("log")
    ax.set_xlabel("ε (at the run's δ), after the last round")
    ax.set_ylabel("final eval mean return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(REPO / "simulations" / "configs" / "cartpole_dp.toml"),
                    help="run-config TOML preset ('' for pyproject defaults)")
    ap.add_argument("--grid", nargs="+", action="append", metavar=("KEY", "VALUE"),
                    help="a run-config key and its values; repeat for more keys")
    ap.add_argument("--set", default="", help="extra run-config for every run, 'k=v k=v'")
    ap.add_argument("--no-references", action="store_true", help="skip the non-private and local-only runs")
    ap.add_argument("--supernodes", type=int, default=8)
    ap.add_argument("--out", type=Path, default=REPO / "simulations" / "results-privacy")
    args = ap.parse_args()
    grid_args = args.grid or [["privacy.target-epsilon", "1", "2", "4", "8"], ["seed", "0", "1", "2"]]
    grid = [(g[0], g[1:]) for g in grid_args]
    for key, values in grid:
        if not values:
            ap.error(f"--grid {key} needs at least one value")
    from fedrl.config import DEFAULTS

    unknown = [k for k, _ in grid if k not in DEFAULTS]
    if unknown:
        ap.error(f"--grid: unknown run-config key(s) {unknown}; `fedrl check --list` shows them all")
    common = _join(preset(args.config), args.set)
    runs = plan_runs(grid, not args.no_references)
    check_all(runs, common)
    args.out.mkdir(parents=True, exist_ok=True)
    fields = FIELDS[:2] + [k for k, _ in grid] + FIELDS[2:]
    table = read_csv(args.out / "runs.csv", fields)
    todo = [r for r in runs if run_name(r, common) not in table]
    print(f"privacy sweep: {len(runs)} runs ({len(runs) - len(todo)} already done), results in {args.out}", flush=True)
    flower = Flower(args.out / ".flwr-home")
    started = time.time()
    try:
        for i, run in enumerate(todo, 1):
            name = run_name(run, common)
            desc = " ".join(f"{k}={v}" for k, v in run.items())
            print(f"[{i}/{len(todo)}] {name}: {desc} ...", flush=True)
            wall = execute(flower, args.out / "runs" / name, overrides(run, common), args.supernodes)
            row = result_row(args.out / "runs" / name, run, wall)
            table[name] = row
            write_csv(args.out / "runs.csv", fields, table)
            eta = (time.time() - started) / i * (len(todo) - i)
            eps = "" if row["epsilon"] is None else f"ε {float(row['epsilon']):.3g}, "  # type: ignore[arg-type]
            print(f"      done in {wall:.0f} s: {eps}final mean return {row['final_mean_return']:.1f} "
                  f"(best {row['best_mean_return']:.1f}); about {eta / 60:.0f} min left", flush=True)
    finally:
        flower.stop()
    plot(args.out / "privacy_utility.png", grid, list(read_csv(args.out / "runs.csv", fields).values()))
    print(f"wrote {args.out / 'runs.csv'} and {args.out / 'privacy_utility.png'}", flush=True)


if __name__ == "__main__":
    main()
