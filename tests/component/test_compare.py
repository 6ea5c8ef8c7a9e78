"""``fedrl compare`` on run folders written here: two groups (fedavg, fedprox) x three seeds, one of
which stopped early; the table's medians, the band, the PNG, and bad arguments in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedrl.cli import main
from fedrl.runfolder.compare import band, compare, find_runs, group_runs, labels

# final eval_min_return per (strategy, seed): fedavg 100/200/300, fedprox 400/500/(stopped early at 450)
FINAL = {("fedavg", 0): 100.0, ("fedavg", 1): 200.0, ("fedavg", 2): 300.0,
         ("fedprox", 0): 400.0, ("fedprox", 1): 500.0, ("fedprox", 2): 450.0}


def _write_run(folder: Path, strategy: str, seed: int, rounds: int = 4) -> None:
    folder.mkdir(parents=True)
    config = {"num-server-rounds": 4, "seed": seed, "strategy.name": strategy, "run-name": folder.name,
              "output-dir": str(folder.parent)}
    (folder / "config.json").write_text(json.dumps({"run_config": config, "target_return": 475.0}))
    final = FINAL[(strategy, seed)]
    rows = []
    for r in range(1, rounds + 1):  # the worst variant climbs linearly to its final value in round 4
        ev = final * r / 4
        rows.append({"round": r, "env_steps": 1000 * r + seed, "wall_time_s": 2.0 * r, "bytes_up": 1_000_000 * r,
                     "bytes_down": 500_000 * r, "eval_min_return": ev, "eval_mean_return": ev + 10,
                     "epsilon": 0.5 * r if strategy == "fedprox" else None})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    for (strategy, seed) in FINAL:
        _write_run(runs / f"{strategy}-s{seed}", strategy, seed, rounds=3 if (strategy, seed) == ("fedprox", 2) else 4)
    return runs


def test_two_groups_of_three_seeds_give_the_right_medians_and_a_png(sweep: Path, tmp_path: Path) -> None:
    lines, png = compare([sweep], out=tmp_path / "cmp.png")
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    fedavg, fedprox = lines[2], lines[3]
    assert fedavg.endswith("strategy.name=fedavg") and fedprox.endswith("strategy.name=fedprox")
    # fedavg: finals 100/200/300; best = final; nobody reaches 475; no epsilon; 6 MB at round 4
    assert fedavg.split()[:7] == ["3", "200.0", "[100.0..300.0]", "200.0", "[100.0..300.0]", "-", "-"]
    assert "6.0 [6.0..6.0]" in fedavg
    # fedprox: finals 400/500 and the early stop's last 337.5 (450 * 3/4); only seed 1 reaches 475, in round 4
    assert fedprox.split()[:5] == ["3", "400.0", "[337.5..500.0]", "400.0", "[337.5..500.0]"]
    assert "4,001 [4,001..4,001] (2 never)" in fedprox
    assert "2.00 [1.50..2.00]" in fedprox  # epsilon: the early stop spent 1.5


def test_runs_differing_only_in_seed_and_location_form_one_group(sweep: Path) -> None:
    groups = group_runs(find_runs([sweep]))
    assert [len(g.runs) for g in groups] == [3, 3]
    assert labels(groups) == ["strategy.name=fedavg", "strategy.name=fedprox"]
    assert labels(group_runs(find_runs([sweep / "fedavg-s0", sweep / "fedavg-s1"]))) == ["2 runs"]


def test_the_band_counts_a_curve_only_inside_its_own_x_range() -> None:
    x, mid, lo, hi = band([(np.array([0.0, 2.0]), np.array([0.0, 2.0])), (np.array([1.0, 3.0]), np.array([10.0, 30.0]))])
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert lo.tolist() == [0.0, 1.0, 2.0, 30.0] and hi.tolist() == [0.0, 10.0, 20.0, 30.0]
    assert mid.tolist() == [0.0, 5.5, 11.0, 30.0]


def test_the_cli_prints_the_table_and_writes_the_png(sweep: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plots" / "by_round.png"
    assert main(["compare", str(sweep), "--x", "round", "--metric", "eval_mean_return", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "final eval_mean_return" in printed and f"wrote {out}" in printed and out.exists()


@pytest.mark.parametrize("args, message", [
    ([], "fedrl compare: RUN_DIR: name at least one run folder (or a folder of run folders)"),
    (["{tmp}/nothing"], "fedrl compare: RUN_DIR: {tmp}/nothing is not a folder"),
    (["{tmp}/empty"], "fedrl compare: RUN_DIR: {tmp}/empty has no metrics.jsonl: not a run folder"),
    (["{runs}", "--metric", "eval_max"], ("fedrl compare: --metric: 'eval_max' is in no run's metrics.jsonl; "
                                          "numbers there: bytes_down, bytes_up, env_steps, epsilon")),
    (["{runs}", "--x", "time"], "fedrl compare: --x: invalid choice: 'time'"),
])
def test_bad_arguments_are_one_line_and_exit_2(sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               args: list[str], message: str) -> None:
    (tmp_path / "empty").mkdir()
    argv = [a.format(tmp=tmp_path, runs=sweep) for a in args]
    assert main(["compare", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(message.format(tmp=tmp_path)), err
