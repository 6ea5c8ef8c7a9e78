"""A node's round as an ordered pipeline: receive -> train -> attack -> privatize -> encode.

``build_pipeline`` chooses, once per node from the run config, which stages run and which
variant of each (``fedrl.node.stages``); ``NodePipeline.run`` then applies them in order with
no further look at the config. The order is the contract (``DESIGN.md``, client pipeline):
the update is attacked (experiments) before it is privatized, clipped before it is compressed
or masked, and the state a stage keeps is computed from the update as that stage saw it.

Under secure aggregation (``secagg.enabled``) the encode phase is empty: the node's update,
already privatized, is turned into ring codes and masked by the secure-aggregation stages
(``fedrl.flower.secure_client``), and error feedback and gossip are refused by the config checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedrl.inject.speed import slowdown
from fedrl.node import stages
from fedrl.node.flow import NodeUpdate, Received, RoundStart
from fedrl.node.setup import NodeSetup
from fedrl.node.stages import NodeStage
from fedrl.topology.consensus_step import step_for

Update = NodeStage[NodeUpdate, NodeUpdate]


@dataclass(frozen=True)
class NodePipeline:
    """One node's stages, in the order they run."""

    receive: NodeStage[RoundStart, Received]
    prepare: tuple[NodeStage[Received, Received], ...]  # still receiving: where training starts from
    train: stages.TrainLocally
    attack: tuple[Update, ...]
    privatize: tuple[Update, ...]
    encode: tuple[Update, ...]  # empty under secure aggregation

    def run(self, start: RoundStart) -> NodeUpdate:
        """The node's round from the plan it received to the update it sends."""
        return self.finish(self.train(self.start(start)))

    def start(self, start: RoundStart) -> Received:
        """Receive: the weights training starts from."""
        received = self.receive(start)
        for prepare in self.prepare:
            received = prepare(received)
        return received

    def finish(self, update: NodeUpdate) -> NodeUpdate:
        """Attack, privatize, encode: the trained update on its way out."""
        for stage in (*self.attack, *self.privatize, *self.encode):
            update = stage(update)
        return update

    def describe(self) -> dict[str, list[str]]:
        """Each phase's stage names, in order (for logs and tests)."""
        return {"receive": [self.receive.name, *(s.name for s in self.prepare)], "train": [self.train.name],
                "attack": [s.name for s in self.attack], "privatize": [s.name for s in self.privatize],
                "encode": [s.name for s in self.encode]}


def build_pipeline(setup: NodeSetup, node: int) -> NodePipeline:
    """The pipeline of node ``node`` (0-based) under ``setup``'s config."""
    cfg = setup.cfg
    secure = cfg.secagg.enabled
    is_gossip = cfg.topology.name == "gossip"
    attack = setup.attacks.get(node)  # None: an honest node

    receive: NodeStage[RoundStart, Received] = (
        stages.ReceiveGossip(setup.template, step_for(cfg, [w.shape for w in setup.template]), setup.up.active) if is_gossip
        else stages.ReceiveBroadcast(setup.down, setup.template))
    prepare = (stages.StartFromResidual(cfg, setup.up),) if setup.up.error_feedback and not secure else ()

    train = stages.TrainLocally(cfg, setup.algorithm, setup.spec, setup.variants[node], setup.env_kwargs,
                                setup.sample_dp, attack == "random-action")

    attacks: list[Update] = []
    factor = slowdown(cfg, node)
    if factor > 1:
        attacks.append(stages.SlowDown(factor))
    if attack in ("sign-flip", "gaussian"):
        attacks.append(stages.ByzantineUpdate(attack, cfg.attack.scale))

    private: list[Update] = []
    if setup.privacy is not None or setup.sample_dp is not None:
        private.append(stages.DropPrivateMetrics())
    if setup.privacy is not None:
        private.append(stages.ClipUpdate(setup.privacy))

    encode: list[Update] = []
    if not secure:
        if is_gossip:
            encode.append(stages.GossipStep(cfg.strategy.server_lr))
        if is_gossip and setup.up.active:
            encode.append(stages.ChocoCompress(setup.up))
        elif setup.up.active:
            encode.append(stages.CompressEF21(setup.up) if setup.up.ef21 else stages.Compress(setup.up, cfg))

    return NodePipeline(receive, prepare, train, tuple(attacks), tuple(private), tuple(encode))
