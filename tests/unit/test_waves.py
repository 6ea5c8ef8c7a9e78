"""How a round's logical nodes are batched into cohort messages (``fedrl.flower.transport._waves``)."""

from __future__ import annotations

import logging

import pytest

from fedrl.flower import transport
from fedrl.flower.transport import NodeMap, _note_waves, _waves


def test_each_supernode_gets_at_most_one_batch_a_wave_of_at_most_cohort_nodes() -> None:
    nm = NodeMap(ids=[10, 11])  # even nodes on 10, odd on 11
    nodes = [0, 2, 4, 6, 8, 1, 3]
    assert list(_waves(nodes, nm, cohort=3)) == [[[0, 2, 4], [1, 3]], [[6, 8]]]
    assert list(_waves(nodes, nm, cohort=5)) == [[[0, 2, 4, 6, 8], [1, 3]]]
    assert list(_waves(nodes, nm, cohort=1)) == [[[0], [1]], [[2], [3]], [[4]], [[6]], [[8]]]


def test_a_second_wave_of_cohorts_is_reported_once_with_the_cap_that_avoids_it(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "_NOTED_WAVES", set())
    nm = NodeMap(ids=[10, 11])
    contents = dict.fromkeys([0, 2, 4, 6, 1], None)
    with caplog.at_level(logging.INFO, logger="fedrl"):
        _note_waves(contents, nm, cohort=3, waves=2)  # type: ignore[arg-type]
        _note_waves(contents, nm, cohort=3, waves=2)  # type: ignore[arg-type]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1
    assert "hosts 4 of this round's nodes, more than nodes.cohort-size = 3" in said[0]
    assert "a cohort size of at least 4" in said[0]
