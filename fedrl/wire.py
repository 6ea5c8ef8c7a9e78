"""What travels between a node and the server, as typed data both sides share.

``LocalPlan`` is what the server asks of a node for a round, ``NodeState`` what the node keeps
between rounds (in ``context.state``), ``LocalResult`` what an algorithm's local training
returns, ``Reply`` a node's answer to a training plan, ``Compressed`` a compressed update. They live apart from the server
(``Federation``) and from Flower, so that the ClientApp imports no server-only module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrl.model.moments import Moments


@dataclass(frozen=True)
class Compressed:
    """A compressed update: plain arrays only (never Python objects), plus the decoded length ``n``.

    ``name`` is the compressor's registry name; ``decode`` refuses a payload with another name.
    """

    name: str
    arrays: dict[str, np.ndarray]
    n: int

    @property
    def nbytes(self) -> int:
        """Sum of the payload arrays' ``nbytes`` (the wire size, before framing)."""
        return int(sum(int(a.nbytes) for a in self.arrays.values()))


@dataclass(frozen=True)
class LocalPlan:
    """What the server asks of a node for one round."""

    node: int
    round: int  # 1-based server round
    total_rounds: int  # for learning-rate annealing over the whole run
    seed: int
    prox_mu: float = 0.0
    obs_moments: Moments | None = None  # global observation statistics (None: off)
    ef_base: int = -1  # EF21: round of the node's last update the server accepted (-1: none)
    clip_norm: float = 0.0  # DP: this round's clip norm (adaptive clipping moves it; 0: privacy.clip-norm)
    run_uid: str = ""  # the run's identity, kept across resumes (binds durable node state to the run)


@dataclass(frozen=True)
class NodeState:
    """Cross-round node state; ``to_arrays``/``from_arrays`` give its ``context.state`` form."""

    arrays: dict[str, np.ndarray]

    @staticmethod
    def empty() -> NodeState:
        return NodeState({})


@dataclass(frozen=True)
class LocalResult:
    weights: list[np.ndarray]
    env_steps: int
    obs_moments: Moments | None  # statistics of the observations seen this round only
    state: NodeState
    metrics: dict[str, float]


@dataclass(frozen=True)
class Reply:
    """One node's answer to a training plan: its trained ``weights`` (``compression.up = none``)
    or its compressed ``update`` (trained weights minus the weights it was sent)."""

    node: int
    weights: list[np.ndarray]
    env_steps: int
    obs_moments: Moments | None
    metrics: dict[str, float]
    update: Compressed | None = None
    ef_base: int = -1  # EF21: the round the update is relative to (-1: from zero)
    # Server side, never on the wire: ``update`` decoded (scaled back; EF21's estimate), set once by
    # the server's reply check (``fedrl.server.guards.checked``) so aggregation does not decode it again.
    decoded: list[np.ndarray] | None = None
