"""Node selection: uniform and round-robin draws, and deadline-aware selection learning from history."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.checks.validate import check
from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.server.selection import Selector

DEADLINE = {"nodes.count": 8, "fraction-train": 0.5, "selection.name": "deadline", "round.deadline-s": 5.0}


def test_deadline_selection_avoids_nodes_that_keep_missing() -> None:
    sel = Selector(from_run_config(DEADLINE))
    assert sel.miss_probability().tolist() == [0.5] * 8  # nothing known yet
    for _ in range(5):
        sel.note(range(8), [0, 1, 2])  # nodes 0-2 always late
    assert sel.miss_probability()[0] == pytest.approx(6 / 7) and sel.miss_probability()[3] == pytest.approx(1 / 7)
    picks = [sel.select(r) for r in range(1, 201)]
    assert all(len(p) == 4 for p in picks)
    stragglers = sum(i in (0, 1, 2) for p in picks for i in p)
    assert 0 < stragglers <= 40  # only the exploration slot (10% of rounds) ever picks one
    assert sel.select(7) == sel.select(7)  # seeded


def test_a_straggler_that_recovers_is_found_again() -> None:
    sel = Selector(from_run_config(DEADLINE))
    sel.note(range(8), [0])
    for _ in range(20):
        sel.note([0], [])  # asked again (exploration) and on time
    sel.note(range(1, 8), range(1, 8))  # everyone else missed once
    assert 0 in sel.select(2)


def test_history_survives_the_checkpoint_form() -> None:
    a, b = Selector(from_run_config(DEADLINE)), Selector(from_run_config(DEADLINE))
    a.note([1, 2], [2])
    b.load_meta(a.to_meta())
    assert b.asked.tolist() == a.asked.tolist() and b.missed.tolist() == a.missed.tolist()


def test_uniform_and_round_robin_are_unchanged_by_history() -> None:
    for name in ("uniform", "round-robin"):
        sel = Selector(from_run_config({**DEADLINE, "selection.name": name}))
        before = [sel.select(r) for r in range(1, 6)]
        sel.note(range(8), [0, 1])
        assert [sel.select(r) for r in range(1, 6)] == before


@pytest.mark.parametrize(("over", "key"), [
    ({"round.deadline-s": 0.0}, "round.deadline-s"),
    ({"round.deadline-s": -1.0}, "round.deadline-s"),
])
def test_deadline_misuse_fails_before_round_1(over: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        check({**DEADLINE, **over})
    assert err.value.key == key


def test_deadline_selection_combines_with_secure_aggregation() -> None:
    cfg = check({**DEADLINE, "secagg.enabled": True, "compression.up": "quantize"})
    assert (cfg.selection.name, cfg.secagg.enabled) == ("deadline", True)  # a late node is a dropout of the round


def test_poisson_draws_each_node_with_probability_q_once_per_round(monkeypatch: pytest.MonkeyPatch) -> None:
    # The draw comes from OS entropy in a run; here a seeded generator stands in, so the counts
    # are the same on every machine (a 3-sd bound on the real draw failed CI once).
    from fedrl.server import selection

    seeded = np.random.default_rng(20261207)
    monkeypatch.setattr(selection, "private_rng", lambda: seeded)
    sel = Selector(from_run_config({"nodes.count": 1000, "fraction-train": 0.1, "selection.name": "poisson"}))
    assert sel.expected() == pytest.approx(100.0)
    first = sel.select(1)
    assert sel.select(1) == first == sorted(first)  # one draw per round, asked as often as the round needs
    draws = [sel.select(r) for r in range(2, 202)]
    counts = [len(d) for d in draws]
    # Binomial(1000, 0.1): mean 100, sd 9.5; the mean of 200 rounds has sd 0.67
    assert abs(sum(counts) / len(counts) - 100) < 2.0
    assert min(counts) < 95 and max(counts) > 105  # the count varies, as Poisson sampling's does
    every = np.bincount(np.concatenate(draws), minlength=1000)
    assert every.min() > 0 and every.max() < 50  # each node drawn about 20 times, none left out
    everyone = Selector(from_run_config({"nodes.count": 8, "selection.name": "poisson"}))
    assert everyone.select(3) == list(range(8)) and everyone.expected() == 8.0


def test_poisson_draws_cannot_be_replayed_from_the_seed() -> None:
    cfg = from_run_config({"nodes.count": 1000, "fraction-train": 0.1, "selection.name": "poisson"})
    a, b = Selector(cfg), Selector(cfg)
    assert [a.select(r) for r in range(1, 4)] != [b.select(r) for r in range(1, 4)]


def test_uniform_selection_divides_by_the_nodes_it_draws() -> None:
    sel = Selector(from_run_config({"nodes.count": 10, "fraction-train": 0.35}))
    assert sel.expected() == 4.0 == len(sel.select(1))
