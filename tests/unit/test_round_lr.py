"""The mean learning rate of a round, which scales error-feedback updates."""

from __future__ import annotations

import pytest

from fedrl.compression.pipeline import stage, uplink_scale
from fedrl.config import from_run_config
from fedrl.rl.train import round_lr


def test_round_lr_is_the_mean_of_the_annealed_schedule() -> None:
    cfg = from_run_config({"ppo.lr": 1.0, "algo.local-steps": 1024, "num-server-rounds": 2})  # 4 PPO iterations
    assert round_lr(cfg, 1) == pytest.approx((1 + 0.875 + 0.75 + 0.625) / 4)
    assert round_lr(cfg, 2) == pytest.approx((0.5 + 0.375 + 0.25 + 0.125) / 4)
    assert round_lr(from_run_config({"ppo.lr": 0.3, "ppo.anneal-lr": False, "num-server-rounds": 10}), 7) == 0.3


def test_only_error_feedback_uplinks_are_scaled() -> None:
    cfg = from_run_config({"compression.up": "topk"})
    assert uplink_scale(cfg, stage(cfg.compression, "up"), 1) == pytest.approx(round_lr(cfg, 1))
    q = from_run_config({"compression.up": "quantize"})
    assert uplink_scale(q, stage(q.compression, "up"), 1) == 1.0
