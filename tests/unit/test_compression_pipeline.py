"""The compression stage: flattening, framing, downlink broadcasts and ring codes."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.compression import Compressed, make_compressor
from fedrl.compression.downlink import BASE_KEY, ROUND_KEY, Broadcaster, StaleBase, receive
from fedrl.compression.framing import Frame, frame, unframe
from fedrl.compression.pipeline import (
    Stage,
    compress,
    decompress,
    rng_for,
    stage,
    training_start,
)
from fedrl.compression.ring_codes import RingCoding, pack_ring, required_ring_bits, unpack_ring
from fedrl.config import CompressionConfig
from fedrl.model.layout import flatten, unflatten

LIKE = [np.zeros((3, 4), np.float32), np.zeros(5, np.float32)]


def test_flatten_unflatten_round_trip() -> None:
    arrays = [np.arange(12, dtype=np.float32).reshape(3, 4), np.arange(5, dtype=np.float32) - 9]
    vec = flatten(arrays)
    assert vec.tolist() == list(range(12)) + [-9, -8, -7, -6, -5]
    back = unflatten(vec, LIKE)
    assert [b.shape for b in back] == [(3, 4), (5,)]
    np.testing.assert_array_equal(back[1], arrays[1])
    with pytest.raises(ValueError, match="17 parameters"):
        unflatten(np.zeros(16, np.float32), LIKE)


@pytest.mark.parametrize("name", ["none", "fp16", "bf16", "quantize", "qsgd", "topk", "randk", "sign"])
def test_framing_round_trips_every_compressor(name: str) -> None:
    x = np.random.default_rng(0).normal(size=1000).astype(np.float32)
    c = make_compressor(name, fraction=0.05).encode(x, np.random.default_rng(1))
    f = frame(c)
    assert f.blob.dtype == np.uint8 and f.blob.size == c.nbytes  # no padding, no headers
    back = unframe(f)
    assert back.name == c.name and back.n == c.n and sorted(back.arrays) == sorted(c.arrays)
    for k in c.arrays:
        np.testing.assert_array_equal(back.arrays[k], c.arrays[k])


def test_unframe_rejects_inconsistent_tables() -> None:
    f = frame(Compressed("fp16", {"values": np.ones(4, np.float16)}, 4))
    with pytest.raises(ValueError, match="shorter"):
        unframe(Frame(f.name, f.n, f.keys, f.dtypes, [5], f.blob))
    with pytest.raises(ValueError, match="longer"):
        unframe(Frame(f.name, f.n, f.keys, f.dtypes, [3], f.blob))
    with pytest.raises(ValueError, match="dtype 'object'"):
        unframe(Frame(f.name, f.n, f.keys, ["object"], f.lengths, f.blob))


def test_stage_turns_error_feedback_on_for_biased_compressors() -> None:
    assert stage(CompressionConfig(up="topk"), "up").error_feedback
    assert stage(CompressionConfig(up="sign"), "up").error_feedback
    assert stage(CompressionConfig(up="topk", error_feedback="ef21"), "up").ef21
    assert stage(CompressionConfig(up="quantize"), "up").feedback == "off"
    assert stage(CompressionConfig(up="quantize", error_feedback="on"), "up").error_feedback
    assert stage(CompressionConfig(up="topk", error_feedback="on"), "up").error_feedback
    assert stage(CompressionConfig(up="topk", error_feedback="off"), "up").feedback == "off"
    assert stage(CompressionConfig(down="topk"), "down").feedback == "off"  # the broadcast resends by itself
    assert not stage(CompressionConfig(down="none", error_feedback="on"), "down").active


def test_error_feedback_carries_the_residual_across_rounds() -> None:
    st = stage(CompressionConfig(up="topk", fraction=0.1, error_feedback="on"), "up")
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=200).astype(np.float32) for _ in range(5)]
    residual = None
    sent = np.zeros(200, np.float64)
    for t, x in enumerate(xs):
        c, residual = compress(x, st, rng_for("topk", 0, t, 3), residual)
        sent += decompress(c, st, 200)
    assert residual is not None
    # Everything not yet sent is in the residual: sent + residual == sum of the updates.
    np.testing.assert_allclose(sent + residual, np.sum(xs, axis=0), atol=1e-4)


def test_randk_stream_is_shared_by_the_round_other_streams_are_per_node() -> None:
    assert rng_for("randk", 1, 2, 0).integers(1 << 30) == rng_for("randk", 1, 2, 5).integers(1 << 30)
    assert rng_for("quantize", 1, 2, 0).integers(1 << 30) != rng_for("quantize", 1, 2, 5).integers(1 << 30)


def _node_state_after(dl, st: Stage, state: dict, rnd: int) -> tuple[list[np.ndarray], dict]:
    w, kept = receive(dl, st, state, rnd, LIKE)
    return w, {**state, **kept}


def test_downlink_nodes_track_the_broadcast_and_stale_nodes_get_full_weights() -> None:
    st = stage(CompressionConfig(down="quantize", bits=8), "down")
    rng = np.random.default_rng(0)
    model = [rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=5).astype(np.float32)]
    cast = Broadcaster(st, model, seed=0, slot=0)
    state: dict[str, np.ndarray] = {}
    cast.advance(model, 1)
    dl = cast.downlink(None)
    assert dl.weights is not None and dl.delta is None  # a new node gets the broadcast in full
    w, state = _node_state_after(dl, st, state, 1)
    for rnd in range(2, 6):
        model = [m + 0.01 * rng.normal(size=m.shape).astype(np.float32) for m in model]
        cast.advance(model, rnd)
        dl = cast.downlink(rnd - 1)
        assert dl.delta is not None and dl.base_round == rnd - 1
        w, state = _node_state_after(dl, st, state, rnd)
        np.testing.assert_array_equal(flatten(w), flatten(cast.base))  # node and server agree exactly
        # What was not sent is sent later: the broadcast stays within one quantization step of the model.
        assert np.abs(flatten(cast.base) - flatten(model)).max() < 0.05
    assert int(state[ROUND_KEY][0]) == 5 and state[BASE_KEY].shape == (17,)
    cast.advance(model, 6)
    with pytest.raises(StaleBase, match="round 5"):
        receive(cast.downlink(5), st, {**state, ROUND_KEY: np.asarray([3])}, 6, LIKE)
    assert cast.downlink(3).weights is not None  # the server knows a node holding round 3 needs weights


def test_downlink_none_sends_the_model_itself() -> None:
    st = stage(CompressionConfig(), "down")
    model = [np.ones((3, 4), np.float32), np.ones(5, np.float32)]
    cast = Broadcaster(st, model, seed=0, slot=0)
    cast.advance(model, 1)
    dl = cast.downlink(0)
    assert dl.weights is not None and dl.weights[0] is model[0]
    w, kept = receive(dl, st, {}, 1, LIKE)
    assert kept == {} and w[1].tolist() == [1.0] * 5


def test_required_ring_bits_exact() -> None:
    assert required_ring_bits(8, 1) == 8
    assert required_ring_bits(8, 2) == 9  # 2 * 255 = 510
    assert required_ring_bits(8, 8) == 11  # 2040
    assert required_ring_bits(8, 100) == 15  # 25500 < 32768
    assert required_ring_bits(8, 129) == 16  # 32895 > 32767
    assert required_ring_bits(1, 3) == 2


def test_ring_codes_decode_the_weighted_mean_within_one_step() -> None:
    rc = RingCoding(bits=8, clip=0.5, weight_bound=1024)
    rng = np.random.default_rng(0)
    xs = [rng.uniform(-0.4, 0.4, 500).astype(np.float32) for _ in range(4)]
    steps = [1024, 512, 1024, 256]
    codes = [rc.encode(x, s, rng) for x, s in zip(xs, steps, strict=True)]
    assert all(c.dtype == np.uint64 and c.max() <= 255 for c in codes)
    mean, ratio_sum = rc.decode_sum(np.sum(codes, axis=0), 4)
    ratios = np.asarray(steps) / 1024
    expected = np.sum([r * x for r, x in zip(ratios, xs, strict=True)], axis=0) / ratio_sum
    step = 2 * 0.5 / 255
    assert abs(ratio_sum - ratios.sum()) <= 4 / 255
    assert np.abs(mean - expected).max() <= 4 * step / ratio_sum + 1e-6


def test_ring_codes_are_unbiased() -> None:
    rc = RingCoding(bits=2, clip=1.0, weight_bound=1.0)
    x = np.full(20000, 0.1, np.float32)
    mean, _ = rc.decode_sum(rc.encode(x, 1, np.random.default_rng(0)), 1)
    assert abs(float(mean.mean()) - 0.1) < 0.01  # step 2/3, so one draw is far off; the mean is not


@pytest.mark.parametrize("bits", [1, 7, 16, 17, 24, 32])
def test_pack_ring_round_trips(bits: int) -> None:
    v = np.random.default_rng(bits).integers(0, 1 << bits, 333, dtype=np.uint64)
    p = pack_ring(v, bits)
    assert p.size == (333 * min(bits, 16) + 7) // 8 + ((333 * (bits - 16) + 7) // 8 if bits > 16 else 0)
    np.testing.assert_array_equal(unpack_ring(p, bits, 333), v)
    with pytest.raises(ValueError, match="bytes"):
        unpack_ring(p[:-1], bits, 333)


def test_error_feedback_nodes_train_from_the_weights_plus_what_they_owe() -> None:
    weights = [np.ones((2, 2), np.float32), np.zeros(3, np.float32)]
    residual = np.arange(7, dtype=np.float32)
    start = training_start(weights, residual, 0.5)
    np.testing.assert_array_equal(start[0], [[1.0, 1.5], [2.0, 2.5]])
    np.testing.assert_array_equal(start[1], [2.0, 2.5, 3.0])
    assert start[0].dtype == np.float32
    for stale in (None, np.zeros(5, np.float32)):  # none yet, or the model changed
        back = training_start(weights, stale, 0.5)
        assert all(np.array_equal(a, b) for a, b in zip(back, weights, strict=True))
