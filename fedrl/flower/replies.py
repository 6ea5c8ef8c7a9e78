"""How a node's finished round becomes its reply content: plain, hostile (experiments) or secure.

Like the node's pipeline stages (``fedrl.node.pipeline``), the kind is chosen once per node from
the run config (``reply_for``). A kind may refuse a plan before training starts (``check``):
training is the expensive part, so a plan that cannot be answered is refused first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from flwr.app import ConfigRecord, Context, RecordDict

from fedrl.config import Config
from fedrl.flower import codec, hostile, secure_client, secure_codec
from fedrl.inject.attacks import HOSTILE
from fedrl.node.flow import NodeUpdate
from fedrl.node.setup import NodeSetup
from fedrl.privacy.plan import PrivacyPlan


class ReplyKind(Protocol):
    """The last step of a node's round, on the Flower side."""

    @property
    def name(self) -> str: ...

    def check(self, plan: RecordDict, context: Context, node: int) -> None:
        """Raise ``WireError`` if the plan (a message's content) cannot be answered (before the node trains)."""

    def content(self, update: NodeUpdate, plan: RecordDict, context: Context) -> RecordDict:
        """The reply to the plan ``plan``, for the node's finished ``update``."""


@dataclass(frozen=True)
class PlainReply:
    """The typed reply (``NodeUpdate.reply``), encoded by ``fedrl.flower.codec``."""

    name: ClassVar[str] = "plain"

    def check(self, plan: RecordDict, context: Context, node: int) -> None:
        return None

    def content(self, update: NodeUpdate, plan: RecordDict, context: Context) -> RecordDict:
        return codec.encode_reply(update.reply())


@dataclass(frozen=True)
class HostileReply:
    """Experiments (``attack.*``): a poisoned or malformed reply instead of the honest one
    (``fedrl.flower.hostile``)."""

    kind: str
    cfg: Config
    obs_dim: int

    @property
    def name(self) -> str:
        return f"hostile({self.kind})"

    def check(self, plan: RecordDict, context: Context, node: int) -> None:
        return None

    def content(self, update: NodeUpdate, plan: RecordDict, context: Context) -> RecordDict:
        return hostile.hostile_content(self.kind, update.reply(), self.cfg, update.plan.round, self.obs_dim)


@dataclass(frozen=True)
class SecureReply:
    """Secure aggregation: the update stays on the node, encoded and masked later; the reply is
    the session's encrypted shares (``fedrl.flower.secure_client.start``)."""

    cfg: Config
    privacy: PrivacyPlan | None
    name: ClassVar[str] = "secure"

    def check(self, plan: RecordDict, context: Context, node: int) -> None:
        _secure_setup(plan, node)
        if not secure_client.has_keys(context, node):
            raise codec.WireError(f"node {node} holds no secure-aggregation keys for this round")

    def content(self, update: NodeUpdate, plan: RecordDict, context: Context) -> RecordDict:
        local, plan_record = update.plan, codec.plan_record(plan)
        return secure_client.start(self.cfg, context, local.node, local.round, plan_record,
                                   _secure_setup(plan, local.node), update.delta, update.env_steps,
                                   update.metrics, self.privacy)


def _secure_setup(content: RecordDict, node: int) -> secure_codec.Setup:
    plan_record: ConfigRecord = codec.plan_record(content)
    setup = secure_codec.get_setup(plan_record)
    if setup is None:
        raise codec.WireError(f"node {node}: secagg.enabled, but the plan carries no secure-aggregation setup")
    return setup


def reply_for(setup: NodeSetup, node: int) -> ReplyKind:
    """How node ``node`` replies: secure under ``secagg.enabled`` (the config checks refuse hostile
    replies there), hostile for a node given a reply attack, plain otherwise."""
    cfg = setup.cfg
    if cfg.secagg.enabled:
        return SecureReply(cfg, setup.privacy)
    attack = setup.attacks.get(node)
    if attack is not None and attack in HOSTILE:
        return HostileReply(attack, cfg, setup.spec.obs_dim)
    return PlainReply()
