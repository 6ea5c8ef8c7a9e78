"""Decentralized (gossip) learning: every node trains its own model, then averages it with its
neighbours' with Metropolis-Hastings weights (D-PSGD, Lian et al., NeurIPS 2017; the local-update
form of Koloskova et al., ICML 2020).

After round r node i holds its trained model ``x_i`` (its update scaled by
``strategy.server-lr``, see ``after_training``) and mixes
``x̄_i = W_ii x_i + sum_{j ~ i} W_ij x_j`` over round r's graph; round r + 1 trains from ``x̄_i``.
The mix is computed on the node at the start of round r + 1 (one exchange per round, not two):
the plan relays the neighbours' models (Flower routes every message through the SuperLink and
the ServerApp, so the ServerApp is the relay and sees every model) and the node takes its own
from its state. The server computes the same mixes, with the same function, to evaluate.

There is no global model. On the complete graph every W_ij = 1/n, so every node starts round
r + 1 from the plain average: FedAvg with equal weights and the same server learning rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedrl.model.layout import flatten, unflatten
from fedrl.topology import choco
from fedrl.topology.graphs import graph, metropolis_hastings

MODEL_KEY, ROUND_KEY = "gossip.model", "gossip.round"


@dataclass(frozen=True)
class Mix:
    """A gossip plan's weights: node i starts from ``self_weight`` times its own model (the one it
    trained in ``own_round``, 0 for the initial model) plus ``w`` times each neighbour's model.

    ``own`` carries the node's own model when the server does not know the node holds it (the
    first round, after a failed reply, a restarted node); otherwise the node takes it from its state.
    """

    self_weight: float
    own_round: int
    own: list[np.ndarray] | None
    peers: list[tuple[int, float, list[np.ndarray]]]  # (node, W_ij, model), ascending node


class StaleModel(ValueError):
    """The node does not hold the model the server mixes it with (the server sends it next time)."""


def mix(self_weight: float, own: Sequence[np.ndarray], peers: Sequence[tuple[float, Sequence[np.ndarray]]]
        ) -> list[np.ndarray]:
    """``self_weight * own + sum(w * model)`` in float64, own first then peers in the given order
    (node and server call this one function, so they get the same float32 result)."""
    out = [self_weight * np.asarray(a, np.float64) for a in own]
    for w, model in peers:
        if len(model) != len(out) or any(a.shape != b.shape for a, b in zip(model, out, strict=True)):
            raise ValueError("a neighbour's model has the wrong shapes")
        for acc, a in zip(out, model, strict=True):
            acc += w * np.asarray(a, np.float64)
    return [a.astype(np.float32) for a in out]


def receive(m: Mix, state: dict[str, np.ndarray], like: list[np.ndarray], gamma: float = 1.0) -> list[np.ndarray]:
    """Node side: the weights to train from (``receive_public`` without the public copy)."""
    return receive_public(m, state, like, gamma)[0]


def receive_public(m: Mix, state: dict[str, np.ndarray], like: list[np.ndarray], gamma: float = 1.0
                   ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Node side: the weights to train from, and the node's public copy (``fedrl.topology.choco``).

    The node's own model comes from its state, or from the plan when the server sends it; its
    public copy from its state (``choco.PUBLIC_KEY``, kept under compression), else it is the own
    model (uncompressed gossip, where the server holds exactly that). The relayed peers' models
    are their public copies. Without a public copy and with ``gamma = 1`` the start is the mix
    itself (plain gossip); otherwise ``choco.start``.

    Raises:
        StaleModel: the plan relies on an own model this node does not hold.
        ValueError: a model of the wrong shapes.
    """
    public = None
    if m.own is not None:  # the server's copy of this node's model: both its model and public copy now
        own = [np.asarray(w, np.float32) for w in m.own]
    else:
        held = int(state[ROUND_KEY][0]) if ROUND_KEY in state else None
        if held != m.own_round or MODEL_KEY not in state:
            raise StaleModel(f"mixes with its round-{m.own_round} model, holds round {held}")
        own = unflatten(state[MODEL_KEY].astype(np.float32), like)
        if choco.PUBLIC_KEY in state:
            public = unflatten(state[choco.PUBLIC_KEY].astype(np.float32), like)
    if len(own) != len(like) or any(a.shape != b.shape for a, b in zip(own, like, strict=True)):
        raise ValueError("the node's own model has the wrong shapes")
    if not (np.isfinite(m.self_weight) and all(np.isfinite(w) for _, w, _ in m.peers)):
        raise ValueError("non-finite mixing weights")
    mixed = mix(m.self_weight, own if public is None else public, [(w, model) for _, w, model in m.peers])
    if public is None and gamma == 1.0:
        return mixed, own
    return choco.start(own, own if public is None else public, mixed, gamma), own if public is None else public


def after_training(start: list[np.ndarray], trained: list[np.ndarray], step: float, rnd: int
                   ) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """Node side, after training in round ``rnd`` from ``start``: the model it sends and keeps,
    ``start + step * (trained - start)`` (float64; ``step = 1``: ``trained`` exactly), and the
    state entries that keep it.

    ``step`` is ``strategy.server-lr``: the same step FedAvg's server takes on the mean update,
    taken by each node on its own update before mixing. The network average then moves by
    ``step`` times the mean update, and on the complete graph gossip is FedAvg with that step.
    """
    out = [(s.astype(np.float64) + step * (t.astype(np.float64) - s.astype(np.float64))).astype(np.float32)
           for s, t in zip(start, trained, strict=True)]
    return out, {MODEL_KEY: flatten(out), ROUND_KEY: np.asarray([rnd], np.int64)}


def mixed_models(w: np.ndarray, models: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
    """Every node's mix under mixing matrix ``w`` (row i: node i's weights), as ``mix`` computes it."""
    return [mix(float(w[i, i]), models[i], [(float(w[i, j]), models[j]) for j in range(len(models))
                                              if j != i and w[i, j] > 0])
            for i in range(len(models))]


def consensus_distance(models: Sequence[Sequence[np.ndarray]]) -> float:
    """sqrt(mean_i ||x_i - x_mean||^2) over flattened models (Kong et al., ICML 2021): 0 when all agree."""
    x = np.stack([flatten(list(m)).astype(np.float64) for m in models])
    return float(np.sqrt(np.mean(np.sum((x - x.mean(axis=0)) ** 2, axis=1))))


class Relay:
    """Server side of gossip: each round's mixing matrix, and the round each node's model is from."""

    def __init__(self, graph_name: str, n: int, degree: int, seed: int) -> None:
        self.graph_name, self.n, self.degree, self.seed = graph_name, n, degree, seed
        self.trained = [0] * n  # round of the model the server holds for each node (0: initial)
        self._w: dict[int, np.ndarray] = {}

    def weights(self, rnd: int) -> np.ndarray:
        """The Metropolis-Hastings matrix nodes mix with after training in round ``rnd``."""
        if rnd not in self._w:
            self._w = {rnd: metropolis_hastings(graph(self.graph_name, self.n, rnd, self.degree, self.seed))}
        return self._w[rnd]

    def plan(self, node: int, rnd: int, models: Sequence[list[np.ndarray]], holds: int | None) -> Mix:
        """What node ``node`` mixes at the start of round ``rnd`` (``holds``: the round of the own
        model the server knows the node keeps, None if unknown)."""
        own = None if holds == self.trained[node] and self.trained[node] > 0 else models[node]
        if rnd == 1:
            return Mix(1.0, self.trained[node], own, [])
        w = self.weights(rnd - 1)
        peers = [(j, float(w[node, j]), models[j]) for j in range(self.n) if j != node and w[node, j] > 0]
        return Mix(float(w[node, node]), self.trained[node], own, peers)

    def mixed(self, rnd: int, models: Sequence[list[np.ndarray]], gamma: float = 1.0) -> list[list[np.ndarray]]:
        """Every node's model after round ``rnd``'s mixing (round 0: the models themselves); with
        ``gamma < 1`` the CHOCO step ``x + gamma * (mix - x)`` (``fedrl.topology.choco``), with the
        server's copies standing in for the nodes' own models."""
        if rnd == 0:
            return [list(m) for m in models]
        mixed = mixed_models(self.weights(rnd), models)
        if gamma == 1.0:
            return mixed
        return [choco.start(x, x, m, gamma) for x, m in zip(models, mixed, strict=True)]
