"""The PNG learning curves: one line per variant for a few, a band for many."""

from __future__ import annotations

from pathlib import Path

from fedrl.runfolder.results import MAX_CURVES, RunFolder


def _folder(tmp_path: Path, variants: int) -> RunFolder:
    folder = RunFolder(tmp_path / f"v{variants}")
    for rnd in (1, 2, 3):
        folder.append_metrics({"round": rnd, "env_steps": rnd * 1000,
                               "eval_returns": [float(rnd * 10 + j % 7) for j in range(variants)]})
    return folder


def test_a_few_variants_get_a_line_each_and_many_a_band(tmp_path: Path) -> None:
    few = _folder(tmp_path, MAX_CURVES).plot([f"v{j}" for j in range(MAX_CURVES)])
    assert [p.name for p in few] == ["eval_vs_round.png", "eval_vs_env_steps.png"]
    many = _folder(tmp_path, 1000).plot([f"v{j}" for j in range(1000)])
    assert all(p.stat().st_size > 1000 for p in many) and len(many) == 2
