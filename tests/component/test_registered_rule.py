"""A server rule registered from this file only: the unweighted mean of the updates.

Nothing in fedrl knows it: the test subclasses ``Mean`` (overriding only ``mean``), registers it
under a new ``strategy.name``, checks its exact step on constructed replies and its state through
a checkpoint, and runs two rounds through the real ClientApp handler (``tests.inprocess``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from fedrl.aggregation.fedavg import weighted_mean
from fedrl.checks.validate import check
from fedrl.config import from_run_config
from fedrl.registry.rules import register, unregister
from fedrl.rules.base import Model, Update
from fedrl.rules.star import Mean
from fedrl.server.federation import Federation
from fedrl.server.snapshot import restore, snapshot
from fedrl.storage.checkpoint import Checkpoint
from fedrl.wire import Reply
from tests.inprocess import run_rounds, task  # noqa: F401 - the fixture


class EqualWeights(Mean):
    """Every node counts the same, whatever its env steps (q-FFL-style fairness at q = 0)."""

    def mean(self, updates: list[Update], rnd: int) -> Model | None:
        return weighted_mean([u.delta for u in updates], [1.0] * len(updates))


RUN = {"strategy.name": "equal-weight", "nodes.count": 3, "num-server-rounds": 2, "algo.local-steps": 256,
       "eval.episodes": 1, "algo.norm-obs": "off", "strategy.server-lr": 0.5, "strategy.server-lr-end": -1}


@pytest.fixture
def equal_weight() -> Iterator[None]:
    register("equal-weight", EqualWeights)
    yield
    unregister("equal-weight")


def test_a_registered_rule_steps_with_its_own_mean(equal_weight: None) -> None:
    fed = Federation(from_run_config(RUN))
    assert isinstance(fed.rule, EqualWeights)
    fed.begin_round(1)
    g = [w.copy() for w in fed.models[0]]
    # deltas +1 (100 steps) and +4 (200 steps): equal weights give 2.5 (FedAvg would give 3), times 0.5
    fed.aggregate([Reply(0, [w + np.float32(1) for w in g], 100, None, {}),
                   Reply(2, [w + np.float32(4) for w in g], 200, None, {})])
    for new, old in zip(fed.models[0], g, strict=True):
        np.testing.assert_allclose(new - old, 1.25, rtol=0, atol=1e-6)
    fed.completed(1)
    again = Federation(from_run_config(RUN))
    ck = snapshot(fed, 0.0)
    restore(again, Checkpoint(ck.meta, ck.arrays))
    for a, b in zip(again.models[0], fed.models[0], strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.usefixtures("task")
def test_a_registered_rule_runs_rounds_through_the_client(equal_weight: None) -> None:
    check(RUN)
    fed = Federation(from_run_config(RUN))
    start = [w.copy() for w in fed.models[0]]
    assert run_rounds(fed, RUN, 2) == [{}, {}]
    assert fed.counters.env_steps == 2 * 3 * 256
    moved = np.concatenate([(a - b).ravel() for a, b in zip(fed.models[0], start, strict=True)])
    assert np.all(np.isfinite(moved)) and np.abs(moved).max() > 0
