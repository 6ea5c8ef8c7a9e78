"""How a round's logical nodes are batched into messages (``fedrl.flower.waves``)."""

from __future__ import annotations

import logging

import pytest

from fedrl.flower import waves as waves_module
from fedrl.flower.waves import waves


def _two(node: int) -> int:  # two SuperNodes: even nodes on 10, odd on 11
    return 10 + node % 2


def test_each_supernode_gets_at_most_one_batch_a_wave_of_at_most_cohort_nodes() -> None:
    nodes = [0, 2, 4, 6, 8, 1, 3]
    assert waves(nodes, _two, cohort=3) == [[[0, 2, 4], [1, 3]], [[6, 8]]]
    assert waves(nodes, _two, cohort=5) == [[[0, 2, 4, 6, 8], [1, 3]]]
    assert waves(nodes, _two, cohort=1) == [[[0], [1]], [[2], [3]], [[4]], [[6]], [[8]]]
    assert waves([], _two, cohort=4) == []


def test_a_second_wave_of_cohorts_is_reported_once_with_the_cap_that_avoids_it(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waves_module, "_NOTED", set())
    with caplog.at_level(logging.INFO, logger="fedrl"):
        waves([0, 2, 4, 6, 1], _two, cohort=5)  # fits: nothing to say
        waves([0, 2, 4, 6, 1], _two, cohort=1)  # one node a message: waves are the point
        waves([0, 2, 4, 6, 1], _two, cohort=3)
        waves([0, 2, 4, 6, 1], _two, cohort=3)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1
    assert "hosts 4 of this round's nodes, more than nodes.cohort-size = 3: they go in 2 waves" in said[0]
    assert "a cohort size of at least 4" in said[0]
