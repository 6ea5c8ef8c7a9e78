"""Server optimizers inside the Federation: the FedAvg reduction on real aggregation, and the checkpoint."""

from __future__ import annotations

import numpy as np

from fedrl.config import from_run_config
from fedrl.model.layout import flatten, unflatten
from fedrl.server.federation import Federation
from fedrl.server.snapshot import restore, snapshot
from fedrl.storage.checkpoint import Checkpoint
from fedrl.wire import Reply

SMALL = {"nodes.count": 3, "algo.local-steps": 256, "eval.episodes": 1}


def _rounds(fed: Federation, rounds: int = 3) -> np.ndarray:
    rng = np.random.default_rng(0)
    for rnd in range(1, rounds + 1):
        g = fed.models[0]
        replies = [Reply(n, unflatten(flatten(g) + rng.normal(0, 0.01, fed.n_params).astype(np.float32), g),
                         int(rng.integers(200, 300)), None, {}) for n in range(3)]
        fed.aggregate(replies, rnd)
        fed.round = rnd
    return flatten(fed.models[0])


def test_fedadam_with_degenerate_settings_equals_fedavg_with_its_server_lr() -> None:
    plain = _rounds(Federation(from_run_config({**SMALL, "strategy.server-lr": 0.8})))
    adam = _rounds(Federation(from_run_config({**SMALL, "strategy.name": "fedadam", "strategy.server-lr": 0.8,
                                               "strategy.beta1": 0.0, "strategy.beta2": 1.0, "strategy.tau": 1.0})))
    np.testing.assert_array_equal(adam, plain)


def test_the_optimizer_state_survives_a_checkpoint() -> None:
    over = {**SMALL, "strategy.name": "fedyogi", "strategy.server-lr": 0.01}
    fed = Federation(from_run_config(over))
    _rounds(fed, 2)
    again = Federation(from_run_config(over))
    ck = snapshot(fed, 0.0)
    restore(again, Checkpoint(ck.meta, ck.arrays))
    assert again.rule.optimizer.steps == 2
    np.testing.assert_array_equal(again.rule.optimizer.v, fed.rule.optimizer.v)
    np.testing.assert_array_equal(_rounds(again, 1), _rounds(fed, 1))
