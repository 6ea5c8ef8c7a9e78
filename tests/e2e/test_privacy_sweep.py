"""The privacy sweep runner: a real grid through `fedrl run`, its CSV and plot, and a restart that skips."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from fedrl.runfolder.compare import compare
from tests.e2e.harness import REPO

sys.path.insert(0, str(REPO / "simulations"))
from privacy_sweep import overrides, plan_runs, preset, run_name

TINY = ("nodes.count=3 algo.local-steps=256 num-server-rounds=2 eval.episodes=1 algo.hidden='16' "
        "privacy.mode='central' privacy.clip-norm=0.1")


def test_a_preset_becomes_flower_run_config_literals(tmp_path: Path) -> None:
    """Strings quoted, booleans lowercase and unquoted (not the string 'false'), numbers as written."""
    f = tmp_path / "p.toml"
    f.write_text('"algo.hidden" = "64,64"\n"algo.mirror" = true\n"algo.norm-obs-center" = false\n'
                 '"ppo.lr" = 0.001\n"nodes.count" = 1000\n')
    assert preset(str(f)) == ("algo.hidden='64,64' algo.mirror=true algo.norm-obs-center=false ppo.lr=0.001 "
                              "nodes.count=1000")
    assert preset("") == ""


def test_the_plan_has_every_grid_point_and_one_pair_of_references_per_outer_point() -> None:
    grid = [("privacy.target-epsilon", ["2", "8"]), ("seed", ["0", "1"])]
    runs = plan_runs(grid, references=True)
    assert [r["kind"] for r in runs].count("dp") == 4
    assert [r for r in runs if r["kind"] != "dp"] == [
        {"kind": "nonprivate", "seed": "0"}, {"kind": "local", "seed": "0"},
        {"kind": "nonprivate", "seed": "1"}, {"kind": "local", "seed": "1"}]
    names = {run_name(r, TINY) for r in runs}
    assert len(names) == len(runs)  # distinct, and stable:
    assert run_name(runs[0], TINY) == run_name(dict(runs[0]), TINY) != run_name(runs[0], TINY + " seed=3")
    local = overrides({"kind": "local", "seed": "1"}, TINY)
    assert "privacy.mode='off'" in local and "strategy.name='local'" in local and "seed=1" in local
    assert "privacy.mode='central'" not in local  # later settings win


@pytest.mark.slow
def test_a_sweep_writes_one_row_per_run_and_a_restart_skips_them(tmp_path: Path) -> None:
    cmd = [sys.executable, str(REPO / "simulations" / "privacy_sweep.py"), "--config", "", "--set", TINY,
           "--grid", "privacy.target-epsilon", "4", "16", "--supernodes", "2", "--out", str(tmp_path)]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "4 runs (0 already done)" in first.stdout and "[4/4]" in first.stdout
    rows = list(csv.DictReader((tmp_path / "runs.csv").open()))
    assert sorted(r["kind"] for r in rows) == ["dp", "dp", "local", "nonprivate"]
    dp = {r["privacy.target-epsilon"]: r for r in rows if r["kind"] == "dp"}
    assert 3.9 <= float(dp["4"]["epsilon"]) <= 4.0 and 15.9 <= float(dp["16"]["epsilon"]) <= 16.0
    assert float(dp["4"]["noise_multiplier"]) > float(dp["16"]["noise_multiplier"]) > 0
    assert all(r["epsilon"] == "" for r in rows if r["kind"] != "dp") and all(r["rounds"] == "2" for r in rows)
    assert (tmp_path / "privacy_utility.png").stat().st_size > 10_000
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "4 runs (4 already done)" in again.stdout and "[1/" not in again.stdout
    assert list(csv.DictReader((tmp_path / "runs.csv").open())) == rows
    # fedrl compare reads the sweep's folders: four groups (two epsilons, two references), one seed each
    lines, png = compare([tmp_path / "runs"], x="round", out=tmp_path / "compare.png")
    assert len(lines) == 2 + 4 and all(line.split()[0] == "1" for line in lines[2:]) and png.stat().st_size > 10_000
    assert any(line.endswith("privacy.target-epsilon=4.0, strategy.name=fedavg") for line in lines), lines


def test_a_bad_grid_fails_before_any_run(tmp_path: Path) -> None:
    cmd = [sys.executable, str(REPO / "simulations" / "privacy_sweep.py"), "--config", "", "--set", TINY,
           "--grid", "privacy.target-epsilonn", "4", "--out", str(tmp_path)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode != 0 and "privacy.target-epsilonn" in res.stderr
    cmd[cmd.index("privacy.target-epsilonn")] = "privacy.delta"
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode != 0 and "privacy.delta" in res.stdout + res.stderr and not (tmp_path / "runs.csv").exists()
