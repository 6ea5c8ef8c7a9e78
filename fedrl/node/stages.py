"""The stages of a node's round, one small class each, in pipeline order (``fedrl.node.pipeline``).

receive    ``ReceiveBroadcast`` or ``ReceiveGossip``, then ``StartFromResidual`` (error feedback)
train      ``TrainLocally`` (the one call into the algorithm's local training)
attack     ``SlowDown`` (nodes.speed), ``ByzantineUpdate`` (attack.* sign-flip, gaussian)
privatize  ``DropPrivateMetrics``, ``ClipUpdate`` (privacy.mode; local mode also noises)
encode     ``GossipStep``, then ``CompressEF21`` or ``Compress`` (compression.up)

Each is a frozen dataclass holding only what the config fixed; calling it maps one typed value
of ``fedrl.node.flow`` to the next without changing its input. ``name`` says what it does, for
``NodePipeline.describe``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

import numpy as np

from fedrl.algorithms.base import Algorithm, CohortMember
from fedrl.compression import ef21
from fedrl.compression.downlink import Downlink, receive
from fedrl.compression.pipeline import RESIDUAL_KEY, Stage, node_encode, rng_for, training_start, uplink_scale
from fedrl.config import Config
from fedrl.inject.attacks import attack_update
from fedrl.model.layout import flatten, unflatten
from fedrl.node.flow import NodeUpdate, Received, RoundStart
from fedrl.privacy.node import PRIVATE_METRICS, privatize
from fedrl.privacy.plan import PrivacyPlan
from fedrl.rl.networks import PolicySpec
from fedrl.seeding import ATTACK, numpy_rng
from fedrl.topology import choco, gossip
from fedrl.topology.gossip import Mix
from fedrl.wire import LocalPlan, LocalResult

if TYPE_CHECKING:
    from fedrl.rl.dpsgd import SampleDP

In_contra = TypeVar("In_contra", contravariant=True)
Out_co = TypeVar("Out_co", covariant=True)


class NodeStage(Protocol[In_contra, Out_co]):
    """One step of the pipeline: a name, and a call from one flow value to the next."""

    @property
    def name(self) -> str: ...

    def __call__(self, value: In_contra, /) -> Out_co: ...


class WrongPlan(ValueError):
    """A plan of another kind than the run's config makes (a gossip mix in a run without gossip,
    or full weights in a gossip run): the node refuses it before training."""


def _with_delta(u: NodeUpdate, delta: np.ndarray) -> NodeUpdate:
    """``u`` with a new flat update, and the trained weights that send it (``start + delta``)."""
    return dataclasses.replace(u, delta=delta, trained=unflatten(flatten(u.start) + delta, u.start))


# --- receive -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReceiveBroadcast:
    """The plan's weights in full, or the compressed change of the broadcast the node holds
    (``fedrl.compression.downlink``); with downlink compression the node keeps the new broadcast."""

    down: Stage
    template: list[np.ndarray]
    name: ClassVar[str] = "broadcast"

    def __call__(self, start: RoundStart) -> Received:
        if not isinstance(start.downlink, Downlink):
            raise WrongPlan("the plan carries a gossip mix, but this run is not gossip (topology.name)")
        weights, kept = receive(start.downlink, self.down, start.held.arrays, start.plan.round, self.template)
        return Received(start.plan, start.held, weights, kept)


@dataclass(frozen=True)
class ReceiveGossip:
    """Gossip: the node's own model (from its state, or the plan) mixed with the neighbours' models
    the server relayed (``fedrl.topology.gossip.receive_public``); with compressed gossip
    (``public``) the node keeps the public copy it mixed with, for ``ChocoCompress``."""

    template: list[np.ndarray]
    gamma: float = 1.0  # topology.consensus-step
    public: bool = False  # compressed gossip (CHOCO): keep the public copy
    name: ClassVar[str] = "gossip-mix"

    def __call__(self, start: RoundStart) -> Received:
        if not isinstance(start.downlink, Mix):
            raise WrongPlan("a gossip run's plan carries no gossip mix")
        weights, public = gossip.receive_public(start.downlink, start.held.arrays, self.template, self.gamma)
        return Received(start.plan, start.held, weights, {choco.PUBLIC_KEY: flatten(public)} if self.public else {})


@dataclass(frozen=True)
class StartFromResidual:
    """Classic error feedback: train from the received weights plus what the node still owes
    (``fedrl.compression.pipeline.training_start``)."""

    cfg: Config
    up: Stage
    name: ClassVar[str] = "start-from-residual"

    def __call__(self, r: Received) -> Received:
        scale = uplink_scale(self.cfg, self.up, r.plan.round)
        return dataclasses.replace(r, start=training_start(r.start, r.held.arrays.get(RESIDUAL_KEY), scale))


# --- train ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainLocally:
    """Local training for the round's budget on this node's environment variant, by the run's
    algorithm (``algo.name``): a cohort of one through ``Algorithm.train_cohort``, whose default
    builds the node's vector env, calls ``Algorithm.train`` and closes the env, whatever happens.
    The state training returns (optimizer moments, env snapshots, accountant) joins ``kept``.
    """

    cfg: Config
    algorithm: Algorithm
    spec: PolicySpec
    variant: dict[str, float]
    env_kwargs: dict[str, object]
    sample_dp: SampleDP | None  # DP-SGD (privacy.dpsgd)
    random_actions: bool  # the random-action Byzantine node collects with random actions
    name: ClassVar[str] = "train"

    def __call__(self, r: Received) -> NodeUpdate:
        """Train this node alone: a cohort of one (``Algorithm.train_cohort`` builds and closes its envs)."""
        result = self.algorithm.train_cohort(self.cfg, self.spec, [self.member(r)], dict(self.env_kwargs))
        return self.updated(r, result[0])

    def member(self, r: Received) -> CohortMember:
        """This node's part of a cohort's training (``fedrl.node.cohort``)."""
        return CohortMember(r.start, r.plan, r.held, self.variant, self.sample_dp, self.random_actions)

    def updated(self, r: Received, result: LocalResult) -> NodeUpdate:
        """The update that training ``r`` to ``result`` makes."""
        delta = flatten(result.weights) - flatten(r.start)
        # algo.norm-obs = server: the statistics are the server's; what the node saw stays here
        moments = None if self.cfg.algo.norm_obs == "server" else result.obs_moments
        return NodeUpdate(r.plan, r.held, r.start, {**r.kept, **result.state.arrays}, result.weights, delta,
                          result.env_steps, moments, result.metrics)


# --- attack (experiments) ------------------------------------------------------------------------

@dataclass(frozen=True)
class SlowDown:
    """nodes.speed: behave like a device ``factor`` times slower (sleep after training)."""

    factor: float
    name: ClassVar[str] = "slow-down"

    def __call__(self, u: NodeUpdate) -> NodeUpdate:
        time.sleep((self.factor - 1) * u.metrics.get("train_seconds", 0.0))
        return u


@dataclass(frozen=True)
class ByzantineUpdate:
    """A Byzantine node's update in place of the honest one (``fedrl.inject.attacks.attack_update``),
    drawn from the node's attack stream for the round."""

    kind: str  # sign-flip or gaussian
    scale: float  # attack.scale
    name: ClassVar[str] = "byzantine-update"

    def __call__(self, u: NodeUpdate) -> NodeUpdate:
        p = u.plan
        return _with_delta(u, attack_update(self.kind, u.delta, self.scale, numpy_rng(p.seed, ATTACK, p.node, p.round)))


# --- privatize -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class DropPrivateMetrics:
    """Under any DP, data-dependent metrics are not noised: they never leave the node."""

    name: ClassVar[str] = "drop-private-metrics"

    def __call__(self, u: NodeUpdate) -> NodeUpdate:
        return dataclasses.replace(u, metrics={k: v for k, v in u.metrics.items() if k not in PRIVATE_METRICS})


@dataclass(frozen=True)
class ClipUpdate:
    """Clip the update to the round's clip norm (and, in local mode, noise it) before anything
    leaves the node (``fedrl.privacy.node.privatize``). With adaptive clipping the node reports
    whether it was within the bound (``clip_below``; the server noises the count before use)."""

    privacy: PrivacyPlan

    @property
    def name(self) -> str:
        return "clip+noise" if self.privacy.mode == "local" else "clip"

    def __call__(self, u: NodeUpdate) -> NodeUpdate:
        delta, below = privatize(u.delta, self.privacy, u.plan.clip_norm)
        out = _with_delta(u, delta)
        if self.privacy.adaptive:
            out = dataclasses.replace(out, metrics={**out.metrics, "clip_below": float(below)})
        return out


# --- encode (plain replies) ----------------------------------------------------------------------

@dataclass(frozen=True)
class GossipStep:
    """Gossip: step on the own update by ``strategy.server-lr`` and keep the model it sends
    (``fedrl.topology.gossip.after_training``)."""

    server_lr: float
    name: ClassVar[str] = "gossip-step"

    def __call__(self, u: NodeUpdate) -> NodeUpdate:
        trained, own = gossip.after_training(u.start, u.trained, self.server_lr, u.plan.round)
        return dataclasses.replace(u, trained=trained, kept={**u.kept, **own})


@dataclass(frozen=True)
class _Uplink:
    """What both uplink compression stages share: the stage (``compression.up``) and its stream."""

    up: Stage

    @property
    def name(self) -> str:
        feedback = {"ef21": ", ef21", "on": ", error feedback"}.get(self.up.feedback, "")
        return f"compress({self.up.name}{feedback})"

    def rng(self, plan: LocalPlan) -> np.random.Generator:
        """The node's compression stream for the round (``rng_for``: round-shared for randk)."""
        return rng_for(self.up.name, plan.seed, plan.round, plan.node)


@dataclass(frozen=True)
class CompressEF21(_Uplink):
    """EF21 (``fedrl.compression.ef21``): compress the change of the node's estimate, relative to
    the round the plan names; the estimates are node state."""

    def __call__(self, u: NodeUpdate) -> NodeUpdate:
        p = u.plan
        update, ef_base, ef_state = ef21.node_encode(u.delta, p.ef_base, self.up, self.rng(p), u.held.arrays, p.round)
        return dataclasses.replace(u, update=update, ef_base=ef_base, kept={**u.kept, **ef_state})


@dataclass(frozen=True)
class Compress(_Uplink):
    """Compress the update (``compression.up``); with classic error feedback, in units of the
    round's ``uplink_scale``, adding the residual owed and keeping the new one (and PowerSGD's
    warm start, ``node_encode``)."""

    cfg: Config

    def __call__(self, u: NodeUpdate) -> NodeUpdate:
        scale = uplink_scale(self.cfg, self.up, u.plan.round)
        update, kept = node_encode(u.delta / scale, self.up, self.rng(u.plan), u.held.arrays)
        return dataclasses.replace(u, update=update, kept={**u.kept, **kept})


@dataclass(frozen=True)
class ChocoCompress(_Uplink):
    """Compressed gossip (CHOCO, ``fedrl.topology.choco``): send the compressed difference between
    the model the node keeps and its public copy, and advance the public copy by what was sent
    (as the server does on receipt)."""

    def __call__(self, u: NodeUpdate) -> NodeUpdate:
        public = u.kept[choco.PUBLIC_KEY]
        update, kept = node_encode(flatten(u.trained) - public, self.up, self.rng(u.plan), u.held.arrays)
        decoded = unflatten(self.up.compressor.decode(update), u.trained)
        advanced = flatten(choco.advance(unflatten(public, u.trained), decoded))
        return dataclasses.replace(u, update=update, kept={**u.kept, **kept, choco.PUBLIC_KEY: advanced})
