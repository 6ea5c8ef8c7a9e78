"""ClientApp handlers: decode a plan, train the logical node it names, encode the reply.

A SuperNode may serve several logical nodes (when a simulation has fewer SuperNodes than
``nodes.count``); each logical node's state is its own record in ``context.state``. The
server never sends two plans to one SuperNode at once, so those records cannot race.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from flwr.app import Context, Message

from fedrl import durable, speed
from fedrl.attacks import HOSTILE, attack_plan, attack_update
from fedrl.compression import ef21
from fedrl.compression.downlink import receive
from fedrl.compression.pipeline import (
    RESIDUAL_KEY,
    Stage,
    compress,
    flatten,
    rng_for,
    stage,
    training_start,
    unflatten,
)
from fedrl.config import Config, from_run_config
from fedrl.dropout import maybe_fail
from fedrl.envs.make import make_vector_env
from fedrl.envs.spec import parse_kwargs
from fedrl.experiment import policy_spec, variants_of
from fedrl.flower import codec, hostile, secure_client, secure_codec
from fedrl.privacy.node import PRIVATE_METRICS, privatize
from fedrl.privacy.plan import PrivacyPlan, plan_for, sample_plan
from fedrl.rl.networks import ActorCritic, PolicySpec, get_weights
from fedrl.rl.train import LocalPlan, NodeState, train_locally
from fedrl.seeding import ATTACK, numpy_rng
from fedrl.topology import gossip
from fedrl.topology.gossip import Mix
from fedrl.wire import Reply, uplink_scale

if TYPE_CHECKING:
    from fedrl.privacy.dpsgd import SampleDP

log = logging.getLogger("fedrl")


@dataclass(frozen=True)
class Setup:
    cfg: Config
    variants: list[dict[str, float]]
    spec: PolicySpec
    template: list[np.ndarray]  # parameter shapes
    up: Stage
    down: Stage
    env_kwargs: dict[str, object]
    privacy: PrivacyPlan | None
    sample_dp: SampleDP | None  # DP-SGD in local training
    attacks: dict[int, str]  # hostile node -> its kind (attack.*)


@functools.lru_cache(maxsize=4)
def _setup(run_config_json: str) -> Setup:
    cfg = from_run_config(json.loads(run_config_json))
    variants = variants_of(cfg)
    spec = policy_spec(cfg, variants[0])
    model = ActorCritic(spec)
    template = get_weights(model)
    return Setup(cfg, variants, spec, template,
                 stage(cfg.compression, "up"), stage(cfg.compression, "down"), dict(parse_kwargs(cfg.env.kwargs)),
                 plan_for(cfg, spec.action_kind == "continuous", sum(w.size for w in template)),
                 sample_plan(cfg, model), attack_plan(cfg))


def setup(context: Context) -> Setup:
    return _setup(json.dumps(dict(context.run_config), sort_keys=True))


def handle_train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(threads(context.node_config))
    su = setup(context)
    cfg = su.cfg
    plan, dl = codec.decode_plan(msg.content)
    if not 0 <= plan.node < len(su.variants):
        raise ValueError(f"plan for node {plan.node}, but nodes.count is {len(su.variants)}")
    maybe_fail(cfg, plan.round, plan.node, "train")
    plan_cr = codec.plan_record(msg.content)
    setup_sa = secure_codec.get_setup(plan_cr)
    if setup_sa is not None and not secure_client.has_keys(context, plan.node):
        raise codec.WireError(f"node {plan.node} holds no secure-aggregation keys for this round")
    state = codec.load_node_state(context.state, plan.node)
    if not state.arrays:  # a restarted SuperNode: its durable copy, if any (state-dir)
        state = _durable_state(context, plan)
    kept: dict[str, np.ndarray] = {}
    if isinstance(dl, Mix):  # gossip: own model (from state) mixed with the neighbours' the server relayed
        weights = gossip.receive(dl, state.arrays, su.template)
    else:
        weights, kept = receive(dl, su.down, state.arrays, plan.round, su.template)
    if su.up.error_feedback and setup_sa is None:
        weights = training_start(weights, state.arrays.get(RESIDUAL_KEY), uplink_scale(cfg, su.up, plan.round))
    envs = make_vector_env(cfg.env.id, [su.variants[plan.node]] * cfg.algo.num_envs, dict(su.env_kwargs))
    attack = su.attacks.get(plan.node)  # None: an honest node
    try:
        random_actions = attack == "random-action"
        res = train_locally(su.spec, weights, envs, cfg, plan, state, su.sample_dp, random_actions)
    finally:
        envs.close()
    kept.update(res.state.arrays)
    slow = speed.slowdown(cfg, plan.node)
    if slow > 1:  # experiments (nodes.speed): behave like a device `slow` times slower
        time.sleep((slow - 1) * res.metrics.get("train_seconds", 0.0))
    delta = flatten(res.weights) - flatten(weights)
    trained, metrics = res.weights, res.metrics
    if attack in ("sign-flip", "gaussian"):  # experiments: a Byzantine update
        delta = attack_update(attack, delta, cfg.attack.scale, numpy_rng(plan.seed, ATTACK, plan.node, plan.round))
        trained = unflatten(flatten(weights) + delta, weights)
    if su.privacy is not None or su.sample_dp is not None:  # data-dependent metrics are not noised: keep them
        metrics = {k: v for k, v in metrics.items() if k not in PRIVATE_METRICS}
    if su.privacy is not None:  # clip (and, in local mode, noise) before anything leaves the node
        delta, below = privatize(delta, su.privacy, plan.clip_norm)
        trained = unflatten(flatten(weights) + delta, weights)
        if su.privacy.adaptive:
            metrics["clip_below"] = float(below)  # noised by the server before use (central mode only)
    if setup_sa is not None:  # secure aggregation: reply with encrypted shares; the update stays here, masked later
        _store(context, plan, NodeState(kept))
        content = secure_client.start(cfg, context, plan.node, plan.round, plan_cr, setup_sa, delta, res.env_steps,
                                      metrics, su.privacy)
        return Message(content, reply_to=msg)
    if isinstance(dl, Mix):  # gossip: step on the own update (strategy.server-lr); keep what is sent
        trained, own = gossip.after_training(weights, trained, cfg.strategy.server_lr, plan.round)
        kept.update(own)
    update, ef_base = None, -1
    if su.up.active:
        rng = rng_for(su.up.name, plan.seed, plan.round, plan.node)
        if su.up.ef21:
            update, ef_base, ef_state = ef21.node_encode(delta, plan.ef_base, su.up, rng, state.arrays, plan.round)
            kept.update(ef_state)
        else:
            scale = uplink_scale(cfg, su.up, plan.round)
            update, residual = compress(delta / scale, su.up, rng, state.arrays.get(RESIDUAL_KEY))
            if residual is not None:
                kept[RESIDUAL_KEY] = residual
    _store(context, plan, NodeState(kept))
    reply = Reply(plan.node, [] if update is not None else trained, res.env_steps, res.obs_moments,
                  metrics, update, ef_base)
    if attack in HOSTILE:  # experiments: a poisoned or malformed reply (fedrl.attacks)
        return Message(hostile.hostile_content(attack, reply, cfg, plan.round, su.spec.obs_dim), reply_to=msg)
    return Message(codec.encode_reply(reply), reply_to=msg)


def threads(node_config: Mapping[str, object]) -> int:
    """Torch threads for local training: the SuperNode's ``--node-config threads=N`` (a device's
    cores), default 1 (the Simulation Engine runs nodes side by side, one core each)."""
    v = node_config.get("threads", 1)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"node config threads must be an int >= 1, got {v!r}")
    return v


def _state_file(context: Context, plan: LocalPlan) -> tuple[Path, str] | None:
    d = context.node_config.get("state-dir")
    if not d:
        return None
    run = plan.run_uid or f"flower-run-{context.run_id}"
    return durable.state_path(str(d), plan.node), durable.fingerprint(run, dict(context.run_config))


def _durable_state(context: Context, plan: LocalPlan) -> NodeState:
    node = plan.node
    where = _state_file(context, plan)
    if where is None:
        return NodeState.empty()
    arrays, rnd, why = durable.load(*where, before=plan.round)
    if why is not None:
        log.warning("node %d: %s", node, why)
    elif arrays is not None:
        log.info("node %d: resumed its state saved after round %d from %s", node, rnd, where[0])
    return NodeState(arrays or {})


def _store(context: Context, plan: LocalPlan, ns: NodeState) -> None:
    """Keep the node's state in ``context.state`` and, with ``state-dir``, on disk."""
    codec.store_node_state(context.state, plan.node, ns)
    where = _state_file(context, plan)
    if where is not None:
        durable.save(where[0], where[1], plan.round, ns.arrays)


def handle_query(msg: Message, context: Context) -> Message:
    pid = context.node_config.get("partition-id", -1)
    num = context.node_config.get("num-partitions", 0)
    return Message(codec.encode_hello_reply(int(pid), int(num)), reply_to=msg)  # type: ignore[arg-type]



def handle_secure(stage: str) -> Callable[[Message, Context], Message]:
    """The handler of a secure-aggregation stage message (``keys``, ``mask`` or ``unmask``)."""
    fn = {"keys": secure_client.handle_keys, "mask": secure_client.handle_mask,
          "unmask": secure_client.handle_unmask}[stage]

    def handle(msg: Message, context: Context) -> Message:
        return fn(msg, context, setup(context).cfg)

    return handle
