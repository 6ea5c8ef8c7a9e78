"""`fedrl check` / `fedrl run` refuse bad configs before Flower starts, naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FEDRL = str(Path(sys.executable).parent / "fedrl")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([FEDRL, *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    ("override", "must_contain"),
    [
        ("env.vray='length=uniform(0.2, 0.5)'", ["env.vray", "env.vary"]),
        ("env.vary='length=unifrom(0.2, 0.5)'", ["env.vary", "unifrom", "uniform(a,b)"]),
        ("env.vary='lenght=uniform(0.2, 0.5)'", ["env.vary", "lenght", "length"]),
        ("env.id='CartPole-v9'", ["env.id", "CartPole-v9"]),
        ("algo.local-steps=0", ["algo.local-steps"]),
        ("algo.local-steps=100", ["algo.local-steps", "multiple"]),
        ("fraction-train=0.0", ["fraction-train", "(0, 1]"]),
        ("fraction-train=1.5", ["fraction-train"]),
    ],
)
def test_run_refuses_bad_config_before_any_round(override: str, must_contain: list[str]) -> None:
    res = _run("run", ".", "--run-config", override)
    assert res.returncode != 0
    assert "round" not in res.stdout  # nothing started
    line = res.stderr.strip().splitlines()[-1]
    for word in must_contain:
        assert word in line, line


def test_check_accepts_defaults_and_lists_keys() -> None:
    assert _run("check").returncode == 0
    listing = _run("check", "--list").stdout
    assert "env.vary" in listing and "algo.local-steps" in listing
