"""What flows through a node's pipeline, stage to stage (``fedrl.node.pipeline``).

``RoundStart`` (the plan as decoded, the state the node held) -> receive -> ``Received`` (the
weights training starts from) -> train -> ``NodeUpdate`` (trained weights, the flat update,
what training measured) -> attack, privatize, encode -> ``NodeUpdate`` -> ``reply()``.

All three are frozen; a stage returns a new value (``dataclasses.replace``) and never changes
the arrays or dicts it was given. ``kept`` is the node's state after this round: a stage adds
entries by building a new dict, so entries keep the order in which stages added them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrl.compression.base import Compressed
from fedrl.compression.downlink import Downlink
from fedrl.model.moments import Moments
from fedrl.topology.gossip import Mix
from fedrl.wire import LocalPlan, NodeState, Reply


@dataclass(frozen=True)
class RoundStart:
    """A training plan as the node received it, and the state the node held before it.

    ``downlink`` is the plan's weights: a ``Downlink`` (full weights, or a compressed change of
    the broadcast the node holds) or, under gossip, a ``Mix`` of the node's own model and its
    neighbours'. ``held`` is read, never written: what the node keeps is ``kept`` downstream.
    """

    plan: LocalPlan
    downlink: Downlink | Mix
    held: NodeState


@dataclass(frozen=True)
class Received:
    """The weights the node trains from (``start``, per-layer float32 arrays in ``get_weights``
    order) and the state entries receiving them produced (``kept``: the downlink broadcast)."""

    plan: LocalPlan
    held: NodeState
    start: list[np.ndarray]
    kept: dict[str, np.ndarray]


@dataclass(frozen=True)
class NodeUpdate:
    """A trained round on its way out.

    ``delta`` is the flat float32 update ``flatten(trained) - flatten(start)``; stages that change
    it (an attack, clipping) keep ``trained == start + delta``. ``update`` is the compressed
    payload that replaces ``trained`` on the wire (None: uncompressed); ``ef_base`` the EF21
    round it is relative to (-1: none). ``metrics`` are what the node may report (private ones
    removed by the privatize stage).
    """

    plan: LocalPlan
    held: NodeState
    start: list[np.ndarray]
    kept: dict[str, np.ndarray]
    trained: list[np.ndarray]
    delta: np.ndarray
    env_steps: int
    obs_moments: Moments | None
    metrics: dict[str, float]
    update: Compressed | None = None
    ef_base: int = -1

    def state(self) -> NodeState:
        """The node's state to keep after this round."""
        return NodeState(self.kept)

    def reply(self) -> Reply:
        """The plain reply: the compressed update, or the trained weights when there is none."""
        weights = [] if self.update is not None else self.trained
        return Reply(self.plan.node, weights, self.env_steps, self.obs_moments, self.metrics, self.update,
                     self.ef_base)
