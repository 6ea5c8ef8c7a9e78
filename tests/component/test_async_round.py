"""Asynchronous rules inside the Federation: the FedBuff = FedAvg reduction, staleness, FedAsync, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.checks.validate import check
from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.model.layout import flatten, unflatten
from fedrl.server.federation import Federation
from fedrl.wire import Reply

# Pinned: these tests check exact aggregation formulas on replies without observation statistics
# (the defaults turn normalization on and anneal the server step, issue 13).
SMALL = {"nodes.count": 4, "algo.local-steps": 256, "eval.episodes": 1, "algo.norm-obs": "off", "strategy.server-lr-end": -1}


def _reply(fed: Federation, node: int, base: list[np.ndarray], rng: np.random.Generator) -> Reply:
    step = rng.normal(0, 0.01, fed.n_params).astype(np.float32)
    return Reply(node, unflatten(flatten(base) + step, base), int(rng.integers(200, 300)), None, {})


def test_fedbuff_with_k_equal_n_and_no_staleness_is_fedavg() -> None:
    star = Federation(from_run_config(SMALL))
    buff = Federation(from_run_config({**SMALL, "strategy.name": "fedbuff", "strategy.buffer": 4}))
    r1, r2 = np.random.default_rng(7), np.random.default_rng(7)
    for rnd in (1, 2, 3):
        star.begin_round(rnd)
        star.aggregate([_reply(star, n, star.sent(n), r1) for n in range(4)], rnd)
        star.round = rnd
        base = buff.models[0]
        applied: list[tuple[int, int]] = []
        for n in range(4):
            assert not applied
            applied = buff.receive_async(_reply(buff, n, base, r2), buff.round, base)
        assert applied == [(0, 0), (1, 0), (2, 0), (3, 0)]
        buff.round = rnd
    np.testing.assert_array_equal(flatten(buff.models[0]), flatten(star.models[0]))
    assert buff.counters.env_steps == star.counters.env_steps


def test_a_stale_fedbuff_update_counts_less() -> None:
    over = {**SMALL, "strategy.name": "fedbuff", "strategy.buffer": 1, "strategy.server-lr": 1.0}
    fresh, stale = Federation(from_run_config(over)), Federation(from_run_config(over))
    base = [w.copy() for w in fresh.models[0]]
    up = Reply(0, [w + np.float32(0.1) for w in base], 256, None, {})
    fresh.receive_async(up, 0, base)
    stale.round = 3  # the update started from version 0 and lands at version 3: weight 1/2
    assert stale.receive_async(up, 0, base) == [(0, 3)]
    np.testing.assert_allclose(flatten(fresh.models[0]) - flatten(base), 0.1, rtol=1e-5)
    np.testing.assert_allclose(flatten(stale.models[0]) - flatten(base), 0.05, rtol=1e-4)


def test_fedasync_mixes_every_update_at_once() -> None:
    fed = Federation(from_run_config({**SMALL, "strategy.name": "fedasync", "strategy.mixing": 0.5,
                                      "strategy.staleness-exponent": 0.0}))
    base = [w.copy() for w in fed.models[0]]
    assert fed.receive_async(Reply(2, [w + np.float32(1.0) for w in base], 256, None, {}), 0, base) == [(2, 0)]
    np.testing.assert_allclose(flatten(fed.models[0]) - flatten(base), 0.5, rtol=1e-5)


def test_fedbuff_flushes_a_partial_buffer_on_request() -> None:
    fed = Federation(from_run_config({**SMALL, "strategy.name": "fedbuff", "strategy.buffer": 3}))
    base = [w.copy() for w in fed.models[0]]
    assert fed.receive_async(Reply(1, [w + np.float32(0.1) for w in base], 256, None, {}), 0, base) == []
    assert fed.flush_buffer() == [(1, 0)] and fed.flush_buffer() == []
    assert not np.array_equal(flatten(fed.models[0]), flatten(base))


@pytest.mark.parametrize(("over", "key"), [
    ({"strategy.buffer": 5}, "strategy.buffer"),
    ({"strategy.concurrency": 9}, "strategy.concurrency"),
    ({"fraction-train": 0.5}, "fraction-train"),
    ({"secagg.enabled": True, "compression.up": "quantize"}, "secagg.enabled"),
    ({"topology.name": "hierarchical"}, "strategy.name"),  # named by the topology check
    ({"nodes.speed": "uniform(0.5, 2)"}, "nodes.speed"),
    ({"nodes.speed": "fast"}, "nodes.speed"),
])
def test_what_asynchronous_rules_cannot_do_fails_before_round_1(over: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        check({**SMALL, "strategy.name": "fedbuff", **over})
    assert err.value.key == key


@pytest.mark.parametrize("up", [{"compression.up": "quantize", "compression.bits": 8},
                                {"compression.up": "topk", "compression.fraction": 0.05}])  # topk: error feedback on
def test_a_compressed_asynchronous_update_lands_as_the_weights_it_stands_for(up: dict[str, object]) -> None:
    from fedrl.compression.pipeline import compress, decompress, rng_for, uplink_scale

    over = {**SMALL, "strategy.name": "fedbuff", "strategy.buffer": 1, "strategy.server-lr": 1.0}
    packed, plain = Federation(from_run_config({**over, **up})), Federation(from_run_config(over))
    base = [w.copy() for w in packed.models[0]]
    step = np.random.default_rng(3).normal(0, 0.01, packed.n_params).astype(np.float32)
    payload, _ = compress(step, packed.up, rng_for(packed.up.name, 0, 1, 0), None)
    reply = Reply(0, [], 256, None, {}, update=payload)
    assert packed.validate(reply, 0) is None
    assert packed.receive_async(reply, 0, base) == [(0, 0)]
    # what the node meant: the decoded update, times the round's step under error feedback (uplink_scale)
    meant = decompress(payload, packed.up, packed.n_params) * np.float32(uplink_scale(packed.cfg, packed.up, 1))
    plain.receive_async(Reply(0, unflatten(flatten(base) + meant, base), 256, None, {}), 0, base)
    np.testing.assert_array_equal(flatten(packed.models[0]), flatten(plain.models[0]))
    assert not np.array_equal(flatten(packed.models[0]), flatten(base))


def test_asynchronous_rules_take_classic_error_feedback_but_refuse_ef21() -> None:
    assert check({"strategy.name": "fedasync", "compression.up": "topk"}).compression.up == "topk"
    with pytest.raises(ConfigError) as err:
        check({"strategy.name": "fedbuff", "compression.up": "topk", "compression.error-feedback": "ef21"})
    assert str(err.value).startswith("compression.error-feedback: strategy.name = fedbuff does not combine with "
                                     "compression.error-feedback: EF21's server memory")


DP_BUFF = {**SMALL, "nodes.count": 4, "strategy.name": "fedbuff", "strategy.buffer": 2, "strategy.server-lr": 1.0,
           "strategy.staleness-exponent": 0.0, "privacy.mode": "central", "privacy.noise-multiplier": 1.0,
           "privacy.clip-norm": 0.5, "num-server-rounds": 3}


def test_a_dp_fedbuff_step_is_the_clipped_buffer_plus_gaussian_noise_over_k() -> None:
    fed = Federation(from_run_config(DP_BUFF))
    base = [w.copy() for w in fed.models[0]]
    rng = np.random.default_rng(5)
    big = [rng.normal(0, 1, fed.n_params).astype(np.float32) for _ in range(2)]  # norms ~ sqrt(n) >> C = 0.5
    assert fed.receive_async(Reply(0, unflatten(flatten(base) + big[0], base), 256, None, {}), 0, base) == []
    assert fed.receive_async(Reply(1, unflatten(flatten(base) + big[1], base), 300, None, {}), 0, base) == [(0, 0),
                                                                                                             (1, 0)]
    clipped = sum(b * 0.5 / np.linalg.norm(b) for b in big)  # equal weights, whatever the env steps
    noise = 2 * (flatten(fed.models[0]).astype(np.float64) - flatten(base)) - clipped
    assert noise.std() == pytest.approx(1.0 * 0.5, rel=0.05) and abs(noise.mean()) < 0.05  # z C on the sum
    assert fed.dp is not None and fed.dp.ledger.history == [(1.0, 1.0, 1)]  # one Gaussian step, q = 1


def test_a_dp_fedbuff_clip_schedule_follows_the_server_steps_and_clips_a_stale_update_to_the_steps_norm() -> None:
    # privacy.clip-norm-end over 3 server steps: 0.5, 0.3, 0.1
    fed = Federation(from_run_config({**DP_BUFF, "privacy.clip-norm-end": 0.1}))
    assert fed.dp is not None and fed.dp.clip == 0.5
    base = [w.copy() for w in fed.models[0]]
    rng = np.random.default_rng(7)
    assert fed.plan(0, 1)[0].clip_norm == 0.5  # nodes clip to the norm of the coming step
    fed.begin_round(1)
    for node in (0, 1):
        fed.receive_async(_reply(fed, node, base, rng), 0, base)
    assert fed.completed(1)["clip_norm"] == 0.5  # the row shows the norm step 1 released under
    assert fed.dp.clip == pytest.approx(0.3) and fed.plan(2, 2)[0].clip_norm == pytest.approx(0.3)
    # step 2 takes two updates sent from version 0 (under 0.5): each is clipped again, to 0.3
    big = [rng.normal(0, 1, fed.n_params).astype(np.float32) for _ in range(2)]
    now = [w.copy() for w in fed.models[0]]
    fed.receive_async(Reply(2, unflatten(flatten(base) + big[0], base), 256, None, {}), 0, base)
    assert fed.receive_async(Reply(3, unflatten(flatten(base) + big[1], base), 256, None, {}), 0, base) == [(2, 1),
                                                                                                          (3, 1)]
    clipped = sum(b * 0.3 / np.linalg.norm(b) for b in big)
    noise = 2 * (flatten(fed.models[0]).astype(np.float64) - flatten(now)) - clipped
    assert noise.std() == pytest.approx(1.0 * 0.3, rel=0.05) and abs(noise.mean()) < 0.05  # z times the step's C
    assert fed.dp.ledger.history == [(1.0, 1.0, 2)]  # the same mechanism each step: ε unchanged by the schedule


def test_the_dp_fedbuff_accountant_matches_a_hand_computation() -> None:
    from opacus.accountants.rdp import RDPAccountant

    fed = Federation(from_run_config(DP_BUFF))
    rng = np.random.default_rng(6)
    for step in range(3):
        base = [w.copy() for w in fed.models[0]]
        for node in (0, 1):
            fed.receive_async(_reply(fed, node, base, rng), step, base)
        fed.round = step + 1
    # three Gaussian mechanisms with z = 1 and every node present: RDP 3 a / (2 z^2) at order a, then
    # Balle et al. 2020's conversion, minimized over Opacus' orders
    orders = np.array(RDPAccountant.DEFAULT_ALPHAS, float)
    eps = 3 * orders / 2 - (np.log(1e-5) + np.log(orders)) / (orders - 1) + np.log((orders - 1) / orders)
    assert fed.epsilon() == pytest.approx(float(np.min(eps)), rel=1e-9)


def test_fedasync_refuses_dp_and_names_dp_fedbuff() -> None:
    with pytest.raises(ConfigError) as err:
        check({**DP_BUFF, "strategy.name": "fedasync"})
    assert str(err.value).endswith("use strategy.name = fedbuff (DP-FedBuff)")


def test_a_resumed_dp_fedbuff_run_that_spent_its_budget_releases_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The asynchronous loop asks the budget before its first step, as the synchronous one does
    before every round: a run resumed with its budget spent ends before sending anything (it made
    one more noised release, to ε 7.1 of a target of 5). The grid is never reached, so none is given."""
    import time

    from fedrl.flower.async_exchange import AsyncExchange
    from fedrl.flower.transport import NodeMap
    from fedrl.runfolder.results import RunFolder
    from fedrl.server.round import run_rounds

    fed = Federation(from_run_config({**SMALL, "strategy.name": "fedbuff", "strategy.buffer": 4, "num-server-rounds": 6,
                                      "privacy.mode": "central", "privacy.noise-multiplier": 1.0,
                                      "privacy.clip-norm": 0.5, "privacy.target-epsilon": 5.0}))
    assert fed.dp is not None
    fed.dp.account()  # one server step, as the checkpoint restores it: ε 4.73, a second would pass 5
    fed.round = 1
    spent = fed.epsilon()
    assert spent is not None and spent < 5.0 and not fed.budget_allows_next_round()
    run_rounds(fed, AsyncExchange(None, NodeMap([1, 2])), RunFolder(tmp_path / "run"), time.time())  # type: ignore[arg-type]
    assert fed.round == 1 and fed.epsilon() == spent
