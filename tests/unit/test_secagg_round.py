"""Whole rounds: the secure sum equals the plain sum of the survivors, exactly, under dropouts."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tooling.secagg_round import DROP_STAGES, run_round, simulate_round

from fedrl.secagg import Params, SecAggAbort, make_params

LENGTH = 40


def inputs(p: Params, seed: int) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {u: rng.integers(0, 1 << p.bits, LENGTH).astype(np.uint64) for u in p.nodes}


def plain_sum(xs: dict[int, np.ndarray], nodes: tuple[int, ...], bits: int) -> list[int]:
    return [sum(int(xs[u][i]) for u in nodes) % (1 << bits) for i in range(LENGTH)]


def expected_survivors(p: Params, drop: dict[str, set[int]]) -> tuple[int, ...]:
    """Nodes that answered through the mask stage and whose secrets enough live holders can rebuild.

    A node whose holders (itself included) that sent shares number fewer than ``threshold`` can
    never be unmasked, so it leaves the round; that can starve another node, hence the fixed point.
    """
    u2 = {u for u in p.nodes if u not in drop.get("advertise", set()) | drop.get("share", set())}
    while short := {u for u in u2 if len(set(p.holders(u)) & u2) < p.threshold}:
        u2 -= short
    return tuple(u for u in p.nodes if u in u2 and u not in drop.get("mask", set()))


@pytest.mark.parametrize("bits", [1, 7, 16, 32])
@pytest.mark.parametrize("k", [0, 4])
def test_no_dropout_sum_is_exact(bits: int, k: int) -> None:
    p = make_params(0, os.urandom(16), [2, 3, 5, 8, 13, 21, 34], k, 0.5, bits, LENGTH, 9)
    xs = inputs(p, bits)
    out = simulate_round(xs, p)
    assert out.survivors == p.nodes and out.dropped == ()
    assert out.total.dtype == np.uint64
    assert out.total.tolist() == plain_sum(xs, p.nodes, bits)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("stage", DROP_STAGES)
@pytest.mark.parametrize(("n", "k"), [(12, 0), (12, 6), (16, 4)])
def test_dropouts_at_each_stage(stage: str, seed: int, n: int, k: int) -> None:
    # t = ceil(0.5 |H|): two dropouts leave every node at least t surviving holders.
    p = make_params(seed, os.urandom(16), range(n), k, 0.5, 16, LENGTH, seed)
    rnd = random.Random(f"{stage}-{seed}-{n}-{k}")
    dropping = set(rnd.sample(p.nodes, 2))
    drop = {stage: dropping}
    xs = inputs(p, seed)
    out = simulate_round(xs, p, drop)
    assert out.survivors == expected_survivors(p, drop)
    assert out.dropped == (tuple(sorted(dropping)) if stage == "mask" else ())
    assert out.total.tolist() == plain_sum(xs, out.survivors, 16)


def test_dropouts_at_every_stage_at_once() -> None:
    p = make_params(5, os.urandom(16), range(20), 0, 0.5, 12, LENGTH, 0)
    drop = {"advertise": {0, 1}, "share": {2, 3}, "mask": {4, 5}, "unmask": {6, 7}}
    xs = inputs(p, 5)
    out = simulate_round(xs, p, drop)
    assert out.survivors == tuple(range(6, 20)) and out.dropped == (4, 5)
    assert out.total.tolist() == plain_sum(xs, out.survivors, 12)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    n=st.integers(3, 12),
    half=st.integers(0, 3),
    fraction=st.sampled_from([0.34, 0.5, 0.67]),
)
def test_random_dropouts_give_exact_sum_or_abort(data: st.DataObject, n: int, half: int, fraction: float) -> None:
    p = make_params(1, os.urandom(16), range(n), 2 * half, fraction, 10, LENGTH, n)
    # Each node stays with probability 0.6, else drops at a uniformly chosen stage.
    fate = data.draw(st.lists(st.sampled_from(("stay",) * 6 + DROP_STAGES), min_size=n, max_size=n))
    drop = {stage: {u for u, f in zip(p.nodes, fate, strict=True) if f == stage} for stage in DROP_STAGES}
    xs = inputs(p, n)
    try:
        out = simulate_round(xs, p, drop)
    except SecAggAbort:
        assert any(drop.values()), "aborted without any dropout"
        return
    assert out.survivors == expected_survivors(p, drop)
    assert len(out.survivors) >= p.threshold
    assert out.total.tolist() == plain_sum(xs, out.survivors, 10)


def test_run_round_returns_the_sum_and_validates() -> None:
    p = make_params(1, os.urandom(16), range(4), 0, 0.5, 8, LENGTH, 0)
    xs = inputs(p, 0)
    assert run_round(xs, p, {"unmask": {3}}).tolist() == plain_sum(xs, p.nodes, 8)
    with pytest.raises(ValueError, match="drop"):
        run_round(xs, p, {"train": {1}})
    with pytest.raises(ValueError, match="inputs"):
        run_round({u: xs[u] for u in (0, 1, 2)}, p)
