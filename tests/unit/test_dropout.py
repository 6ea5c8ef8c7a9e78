"""Seeded failure injection."""

from __future__ import annotations

import pytest

from fedrl.config import from_run_config
from fedrl.inject.dropout import InjectedDropout, failing_stage, maybe_fail


def test_no_failures_without_a_probability() -> None:
    cfg = from_run_config({})
    assert all(failing_stage(cfg, r, n) is None for r in range(1, 20) for n in range(8))


def test_failures_are_seeded_and_about_as_frequent_as_asked() -> None:
    cfg = from_run_config({"nodes.dropout-prob": 0.1, "seed": 3})
    draws = [failing_stage(cfg, r, n) for r in range(1, 201) for n in range(10)]
    assert draws == [failing_stage(cfg, r, n) for r in range(1, 201) for n in range(10)]
    rate = sum(d is not None for d in draws) / len(draws)
    assert 0.08 < rate < 0.12
    assert {d for d in draws if d} == {"train"}  # without secure aggregation only training can fail
    other = from_run_config({"nodes.dropout-prob": 0.1, "seed": 4})
    assert draws != [failing_stage(other, r, n) for r in range(1, 201) for n in range(10)]


def test_secure_runs_fail_at_every_stage_or_the_chosen_one() -> None:
    sec = {"secagg.enabled": True, "compression.up": "quantize", "nodes.dropout-prob": 0.5}
    cfg = from_run_config(sec)
    stages = {failing_stage(cfg, r, n) for r in range(1, 100) for n in range(8)} - {None}
    assert stages == {"train", "advertise", "share", "mask", "unmask"}
    cfg = from_run_config({**sec, "nodes.dropout-stage": "mask"})
    assert {failing_stage(cfg, r, n) for r in range(1, 100) for n in range(8)} == {None, "mask"}


def test_maybe_fail_raises_only_at_the_failing_stage() -> None:
    cfg = from_run_config({"nodes.dropout-prob": 1.0})
    with pytest.raises(InjectedDropout, match="node 2 dropped out at stage 'train' of round 5"):
        maybe_fail(cfg, 5, 2, "train")
    maybe_fail(cfg, 5, 2, "mask")  # not this node's failing stage: no error
