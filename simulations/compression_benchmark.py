"""Compression and secure aggregation, measured side by side in one invocation.

    python simulations/compression_benchmark.py [--only compressors|secagg] [--reps 1] [--secagg-reps 2]
        [--nodes 10,20,50,100] [--out simulations/results-compression]

(a) compressors: heterogeneous CartPole and Pendulum through ``fedrl run`` (Flower's Simulation
    Engine, 8 SuperNodes), once per uplink compressor (downlink full weights), plus a few downlink
    compressors (uplink float32). Per run: uplink and downlink bytes per node per round (from
    metrics.jsonl: what crossed the wire), the final eval return per variant, and the ratios to
    ``none``. Fixed round counts (no early stop), so every run trains on the same env steps.
(b) secure aggregation: for N nodes (one SuperNode each), a CartPole policy of ~104k parameters
    (``algo.hidden=224,224``), rounds with and without secure aggregation (8-bit ``quantize`` in a
    ring just wide enough for N, SecAgg+ graph with 10 neighbours above 20 nodes) and, on the
    same machine, Flower's legacy SecAgg+ and plain legacy FedAvg on 103,715-float vectors
    (its clients return fixed vectors: no training). Round time is the median over rounds after the
    first (the first includes engine warm-up); uplink is bytes per node per round, also in bits per
    parameter.

Runs of one comparison are interleaved (A, B, A, B) because this machine's speed drifts; the
tables report medians over ``--reps``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import BIN, REPO, SUITES, Flower, _join

ROUNDS = {"cartpole": 30, "pendulum": 40}  # CartPole: the default num-server-rounds
# name[:fraction[:ef]], or powersgd:r<rank>[:q<factor bits>]
UPLINK = ["none", "fp16", "bf16", "quantize", "qsgd", "topk", "topk:0.05", "randk", "sign",
          "powersgd:r1", "powersgd:r2", "powersgd:r4", "powersgd:r1:q8", "powersgd:r2:q8", "powersgd:r4:q8"]
DOWNLINK = ["fp16", "quantize", "topk"]
KNOBS = "compression.bits=8 compression.fraction=0.01 compression.levels=16"
PARAMS_B = 103_715  # parameters of the 224x224 CartPole actor-critic


def _fedrl(flower: Flower, rc: str, supernodes: int, timeout: float = 3600, federation: str = "") -> None:
    """``fedrl run`` with one CPU per ClientApp; ``federation`` adds federation-config settings."""
    cmd = [str(BIN / "fedrl"), "run", str(REPO), "--run-config", rc,
           "--federation-config", f"num-supernodes={supernodes} client-resources-num-cpus=1 {federation}".strip()]
    res = subprocess.run(cmd, env=flower.env, capture_output=True, text=True, cwd=REPO, check=False,
                         timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"fedrl run failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")


def _load(folder: Path) -> tuple[dict, list[dict]]:
    if not (folder / "summary.json").exists():
        raise RuntimeError(f"{folder} has no summary.json")
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    return json.loads((folder / "summary.json").read_text()), rows


def _per_node_round(rows: list[dict], key: str, skip: int = 0) -> float:
    """Median bytes per node per round (rounds after the first ``skip``), from cumulative counters."""
    prev, vals = 0, []
    for r in rows:
        nodes = len(r["nodes_trained"]) + len(r["nodes_failed"])
        vals.append((r[key] - prev) / max(nodes, 1))
        prev = r[key]
    return statistics.median(vals[skip:] or vals)


# --- (a) compressors ------------------------------------------------------------------------
def _uplink_knobs(up: str) -> tuple[str, str]:
    """An ``UPLINK`` entry -> (compressor name, run-config knobs)."""
    name, *rest = up.split(":")
    if name == "powersgd":
        rank = next((f[1:] for f in rest if f.startswith("r")), "2")
        bits = next((f[1:] for f in rest if f.startswith("q")), "0")
        return name, f"compression.rank={int(rank)} compression.factor-bits={int(bits)}"
    fraction, ef = (rest + ["", ""])[:2]
    return name, _join(f"compression.fraction={fraction}" if fraction else "",
                       f"compression.error-feedback='{ef}'" if ef else "")


def compressor_run(flower: Flower, out: Path, suite: str, up: str, down: str, rep: int, extra: str = "",
                   keep: bool = False) -> dict:
    """One run of (a); with ``keep``, a finished folder of the same name (summary.json) is read, not rerun."""
    name = f"{suite}-up-{up}-down-{down}-{rep}".replace(":", "@")
    if keep and (out / name / "summary.json").exists():
        return _result(out / name, up, down, rep)
    shutil.rmtree(out / name, ignore_errors=True)
    common = SUITES[suite]["common"].replace("eval.stop-at-target=true", "eval.stop-at-target=false")
    up_name, knobs = _uplink_knobs(up)
    rc = _join(common, f"num-server-rounds={ROUNDS[suite]} eval.every=0 seed={rep} output-dir='{out}' "
                       f"run-name='{name}' {_join(KNOBS, knobs, extra)} compression.up='{up_name}' "
                       f"compression.down='{down}'")
    _fedrl(flower, rc, 8)
    return _result(out / name, up, down, rep)


def _result(folder: Path, up: str, down: str, rep: int) -> dict:
    """One finished run's row of (a): bytes per node per round up and down, final return per variant."""
    summary, rows = _load(folder)
    return {"up": up, "down": down, "rep": rep, "bytes_up": _per_node_round(rows, "bytes_up"),
            "bytes_down": _per_node_round(rows, "bytes_down"),
            "final": [e["mean_return"] for e in summary["eval"]]}


def compressors(flower: Flower, out: Path, reps: int, uplink: list[str], downlink: list[str],
                suites: tuple[str, ...] = ("cartpole", "pendulum"), extra: str = "", first: int = 0,
                keep: bool = False) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {}
    for suite in suites:
        pairs = [(u, "none") for u in uplink] + ([("none", d) for d in downlink] if suite == "cartpole" else [])
        for rep in range(first, first + reps):
            for up, down in pairs:  # interleaved over repetitions
                r = compressor_run(flower, out, suite, up, down, rep, extra, keep)
                results.setdefault(f"{suite}/{up}/{down}", []).append(r)
                print(f"[{suite} rep {rep}] up={up:<8} down={down:<8} up {r['bytes_up']:,.0f} B/node/round  "
                      f"down {r['bytes_down']:,.0f}  final mean {np.mean(r['final']):.1f}", flush=True)
    return results


def _paired_loss(base: list[dict], rs: list[dict]) -> float:
    """Median over seeds of the per-seed loss against ``none`` on the same seed (same variants and
    initial model): chaotic divergence between runs is large on Pendulum, so unpaired medians of
    a few seeds can differ by more than any compressor's effect."""
    losses = _paired_losses(base, rs)
    return statistics.median(losses) if losses else float("nan")


def compressor_table(results: dict[str, list[dict]]) -> None:
    print("\n(a) compressors: bytes per node per round (medians), final eval return per variant")
    print("    loss %: of the median return against none's; paired %: median over seeds of the same-seed loss")
    print(f"{'suite':<9}{'up':<16}{'down':<9}{'bytes up':>10}{'x fewer':>9}{'bytes down':>11}{'x fewer':>9}"
          f"{'mean ret':>10}{'loss %':>8}{'paired %':>9}  per variant")
    for suite in ("cartpole", "pendulum"):
        base = results.get(f"{suite}/none/none")
        if not base:
            continue
        b_up = statistics.median(r["bytes_up"] for r in base)
        b_down = statistics.median(r["bytes_down"] for r in base)
        b_ret = statistics.median(float(np.mean(r["final"])) for r in base)
        for key, rs in results.items():
            s, up, down = key.split("/")
            if s != suite:
                continue
            bu = statistics.median(r["bytes_up"] for r in rs)
            bd = statistics.median(r["bytes_down"] for r in rs)
            finals = [statistics.median(x) for x in zip(*[r["final"] for r in rs], strict=True)]
            ret = statistics.median(float(np.mean(r["final"])) for r in rs)
            loss = 100 * (b_ret - ret) / abs(b_ret)  # positive: worse than none
            print(f"{suite:<9}{up:<16}{down:<9}{bu:>10,.0f}{b_up / bu:>9.2f}{bd:>11,.0f}{b_down / bd:>9.2f}"
                  f"{ret:>10.1f}{loss:>8.1f}{_paired_loss(base, rs):>9.1f}  {' '.join(f'{f:.0f}' for f in finals)}")


def from_folders(out: Path) -> dict[str, list[dict]]:
    """(a)'s results rebuilt from the finished run folders in ``out``, across invocations (seeds
    added later with ``--first-rep``); a folder without ``summary.json`` (a stopped run) is skipped."""
    results: dict[str, list[dict]] = {}
    for folder in sorted(out.iterdir()) if out.is_dir() else []:
        m = re.fullmatch(r"(cartpole|pendulum)-up-(.+)-down-(.+)-(\d+)", folder.name)
        if m is None or not (folder / "summary.json").exists():
            continue
        up, down = m.group(2).replace("@", ":"), m.group(3)
        results.setdefault(f"{m.group(1)}/{up}/{down}", []).append(_result(folder, up, down, int(m.group(4))))
    return results


def _paired_losses(base: list[dict], rs: list[dict]) -> list[float]:
    by_seed = {r["rep"]: float(np.mean(r["final"])) for r in base}
    return [100 * (by_seed[r["rep"]] - float(np.mean(r["final"]))) / abs(by_seed[r["rep"]])
            for r in rs if r.get("rep") in by_seed]


def frontier_plot(results: dict[str, list[dict]], path: Path) -> None:
    """Bytes up (x fewer than float32) against paired loss (median over seeds, bars: min to max),
    one panel per suite, uplink compressors only; dashed: the 5% loss line."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = [s for s in ("cartpole", "pendulum") if f"{s}/none/none" in results]
    if not suites:
        return
    fig, axes = plt.subplots(1, len(suites), figsize=(6.5 * len(suites), 4.8), squeeze=False)
    for ax, suite in zip(axes[0], suites, strict=True):
        base = results[f"{suite}/none/none"]
        b_up = statistics.median(r["bytes_up"] for r in base)
        for key, rs in results.items():
            s, up, down = key.split("/")
            if s != suite or down != "none" or up == "none":
                continue
            losses = _paired_losses(base, rs)
            if not losses:
                continue
            x = b_up / statistics.median(r["bytes_up"] for r in rs)
            med = statistics.median(losses)
            ax.errorbar([x], [med], yerr=[[med - min(losses)], [max(losses) - med]], fmt="o", capsize=3,
                        color="tab:red" if up.startswith("powersgd") else "tab:blue")
            ax.annotate(up, (x, med), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.axhline(5, ls="--", color="gray", lw=1)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%gx"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%gx"))
        ax.set_xlabel("uplink bytes: x fewer than float32")
        ax.set_ylabel("paired loss of final mean return, % (median over seeds)")
        ax.set_title(f"{suite}: {len(base)} seed(s); red: PowerSGD")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"frontier plot: {path}")


# --- (b) secure aggregation -----------------------------------------------------------------
def ours(flower: Flower, out: Path, n: int, secure: bool, rep: int, rounds: int) -> dict:
    name = f"secagg-n{n}-{'secure' if secure else 'plain'}-{rep}"
    shutil.rmtree(out / name, ignore_errors=True)
    k = 0 if n <= 20 else 10
    extra = (f"secagg.enabled=true compression.up='quantize' compression.bits=8 secagg.neighbors={k}"
             if secure else "")
    rc = (f"env.id='CartPole-v1' env.vary='length=linspace(0.4, 1.2)' nodes.count={n} num-server-rounds={rounds} "
          f"algo.hidden='224,224' eval.every=0 eval.episodes=1 nodes.wait-s=600 seed={rep} "
          f"output-dir='{out}' run-name='{name}' {extra}")
    _fedrl(flower, rc, n)
    _, rows = _load(out / name)
    return {"round_s": statistics.median(r["round_time_s"] for r in rows[1:]),
            "bytes_up": _per_node_round(rows, "bytes_up", skip=1),
            "bits": rows[-1].get("secagg_bits"), "k": k}


def legacy(n: int, secure: bool, rep: int) -> dict:
    from tooling.legacy_secaggplus import run_flower_secaggplus

    rng = np.random.default_rng(rep)
    inputs = [[rng.normal(0, 0.01, PARAMS_B).astype(np.float32)] for _ in range(n)]
    shares = 1.0 if n <= 20 else 11  # all nodes, or 10 neighbours + itself, as ours
    res = run_flower_secaggplus(inputs, num_shares=shares, reconstruction_threshold=0.6, secure=secure)
    return {"round_s": res.seconds, "bytes_up": res.bytes_up / n}


def secagg(flower: Flower, out: Path, reps: int, sizes: list[int]) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {}
    for n in sizes:
        rounds = 4
        for rep in range(reps):
            for kind in ("plain", "secure", "flower-plain", "flower-secaggplus"):
                t0 = time.time()
                if kind.startswith("flower"):
                    r = legacy(n, kind == "flower-secaggplus", rep)
                else:
                    r = ours(flower, out, n, kind == "secure", rep, rounds)
                results.setdefault(f"{n}/{kind}", []).append(r)
                print(f"[N={n} rep {rep}] {kind:<18} round {r['round_s']:.2f} s  up {r['bytes_up']:,.0f} B/node  "
                      f"({time.time() - t0:.0f} s)", flush=True)
    return results


def secagg_table(results: dict[str, list[dict]], sizes: list[int]) -> None:
    print(f"\n(b) secure aggregation, {PARAMS_B:,} parameters: round time and uplink per node (medians)")
    print(f"{'N':>4} {'run':<19}{'round s':>9}{'x plain':>9}{'bytes up':>12}{'bits/param':>11}")
    for n in sizes:
        for fam in (("plain", "secure"), ("flower-plain", "flower-secaggplus")):
            base = results.get(f"{n}/{fam[0]}")
            if not base:
                continue
            t_base = statistics.median(r["round_s"] for r in base)
            for kind in fam:
                rs = results[f"{n}/{kind}"]
                t = statistics.median(r["round_s"] for r in rs)
                b = statistics.median(r["bytes_up"] for r in rs)
                print(f"{n:>4} {kind:<19}{t:>9.2f}{t / t_base:>9.2f}{b:>12,.0f}{8 * b / PARAMS_B:>11.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["compressors", "secagg"], action="append")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--first-rep", type=int, default=0, help="(a): seed of the first repetition (more seeds later)")
    ap.add_argument("--keep-done", action="store_true",
                    help="(a): read a repetition whose run folder in --out has finished (summary.json) instead of "
                         "running it again, e.g. to add compressors to a sweep next to its none baseline")
    ap.add_argument("--secagg-reps", type=int, default=0, help="repetitions for (b) (0: --reps)")
    ap.add_argument("--nodes", default="10,20,50,100", help="comma-separated N for (b)")
    ap.add_argument("--uplink", default="",
                    help="(a): only these uplink compressors (and none), e.g. topk,sign; an entry with a colon "
                         "is run as given: name:fraction[:error-feedback], e.g. topk:0.1:off")
    ap.add_argument("--suite", choices=["cartpole", "pendulum"], action="append", help="(a): only this suite")
    ap.add_argument("--set", default="", help="(a): extra run-config for every run, e.g. \"ppo.lr=0.001\"")
    ap.add_argument("--out", type=Path, default=REPO / "simulations" / "results-compression")
    ap.add_argument("--plot", type=Path, default=None, help="(a): frontier PNG (default: OUT/compression_frontier.png)")
    ap.add_argument("--tabulate", action="store_true",
                    help="(a): run nothing; print the table and plot from every finished run folder in --out")
    args = ap.parse_args()
    if args.tabulate:
        found = from_folders(args.out)
        if not found:
            ap.error(f"--tabulate: no finished compressor runs in {args.out}")
        compressor_table(found)
        frontier_plot(found, args.plot or args.out / "compression_frontier.png")
        return 0
    sizes = [int(s) for s in args.nodes.split(",") if s.strip()]
    if any(n < 2 for n in sizes) or not math.isfinite(args.reps) or args.reps < 1:
        ap.error("--nodes must be integers >= 2 and --reps >= 1")
    args.out.mkdir(parents=True, exist_ok=True)
    flower = Flower(args.out / ".flwr-home")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    parts = args.only or ["compressors", "secagg"]
    comp: dict[str, list[dict]] = {}
    sec: dict[str, list[dict]] = {}
    try:
        if "compressors" in parts:
            asked = [u.strip() for u in args.uplink.split(",") if u.strip()]
            up = [u for u in UPLINK if not asked or u == "none" or u.split(":")[0] in asked]
            up += [u for u in asked if ":" in u and u not in up]
            down = [d for d in DOWNLINK if not asked]
            comp = compressors(flower, args.out, args.reps, up, down, tuple(args.suite or ("cartpole", "pendulum")),
                               args.set, args.first_rep, args.keep_done)
        if "secagg" in parts:
            sec = secagg(flower, args.out, args.secagg_reps or args.reps, sizes)
    finally:
        flower.stop()
    if comp:
        compressor_table(comp)
        frontier_plot(comp, args.plot or args.out / "compression_frontier.png")
    if sec:
        secagg_table(sec, sizes)
    (args.out / "compression_benchmark.json").write_text(json.dumps({"compressors": comp, "secagg": sec}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
