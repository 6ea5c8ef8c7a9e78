"""A server rule registered from this file changes what its nodes are sent, with no fedrl module edited.

``ServerRule.proximal_mu`` is the rule's part of the plan (FedProx's term toward the weights a
node is sent; ``fedrl.rules.star.FedProx`` is the built-in one). The rule here asks for a strong
term on even nodes only, stronger in round 1 than in round 2; the plans carry it, the node's
learner applies it (an anchored node moves less from the same start than it does without), and
two rounds run through the real ClientApp handler (``tests.inprocess``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from fedrl.config import from_run_config
from fedrl.flower import codec
from fedrl.model.layout import flatten
from fedrl.registry.rules import register, unregister
from fedrl.rules.star import Mean
from fedrl.server.federation import Federation
from tests.inprocess import run_rounds, task  # noqa: F401 - the fixture


class EvenAnchored(Mean):
    """FedAvg whose even nodes keep a proximal term of 40 / round toward what they are sent."""

    def proximal_mu(self, node: int, rnd: int) -> float:
        return 40.0 / rnd if node % 2 == 0 else 0.0


RUN = {"strategy.name": "even-anchored", "nodes.count": 2, "num-server-rounds": 2, "algo.local-steps": 512,
       "eval.episodes": 1, "algo.norm-obs": "off", "strategy.server-lr": 1.0, "strategy.server-lr-end": -1,
       "env.vary": "length=0.5"}  # both nodes on the same variant: only the term tells them apart


@pytest.fixture
def even_anchored() -> Iterator[None]:
    register("even-anchored", EvenAnchored)
    yield
    unregister("even-anchored")


@pytest.mark.usefixtures("task", "even_anchored")
def test_a_registered_rule_decides_each_node_s_proximal_term_and_runs_two_rounds() -> None:
    fed = Federation(from_run_config(RUN))
    fed.begin_round(1)
    sent = {n: codec.decode_plan(codec.encode_plan(*fed.plan(n, 1)))[0].prox_mu for n in (0, 1)}
    assert sent == {0: 40.0, 1: 0.0}
    assert fed.plan(0, 2)[0].prox_mu == 20.0
    start = flatten(fed.models[0])
    trained: dict[int, np.ndarray] = {}
    real = fed.aggregate

    def keep(replies: list, rnd: int | None = None) -> None:  # the round's replies, before the mean
        if not trained:
            trained.update({r.node: flatten(r.weights) for r in replies})
        real(replies, rnd)

    fed.aggregate = keep  # type: ignore[method-assign]
    assert run_rounds(fed, RUN, 2) == [{}, {}]
    moved = {n: float(np.linalg.norm(w - start)) for n, w in trained.items()}
    assert 0 < moved[0] < 0.5 * moved[1], moved  # the anchored node stayed near what it was sent
    assert fed.counters.env_steps == 2 * 2 * 512 and np.all(np.isfinite(flatten(fed.models[0])))


@pytest.mark.parametrize(("over", "mu"), [
    ({"strategy.name": "fedprox"}, 0.25), ({"strategy.name": "fedavg"}, 0.0),
    ({"strategy.name": "fedprox", "topology.name": "gossip"}, 0.25),
    ({"strategy.name": "fedprox", "topology.name": "hierarchical", "topology.edges": 2}, 0.25),
    ({"strategy.name": "fedavg", "topology.name": "hierarchical", "topology.edges": 2}, 0.0),
    ({"strategy.name": "fedprox", "privacy.mode": "central", "privacy.noise-multiplier": 1.0}, 0.25),
])
def test_the_built_in_rules_send_fedprox_s_term_where_strategy_name_asks_for_it(over: dict, mu: float) -> None:
    fed = Federation(from_run_config({**RUN, **over, "strategy.name": over["strategy.name"], "nodes.count": 4,
                                      "strategy.proximal-mu": 0.25}))
    fed.begin_round(1)
    assert [fed.plan(n, 1)[0].prox_mu for n in range(4)] == [mu] * 4
