"""ClientApp handlers: decode a plan, run the round of the logical node it names, encode the reply.

The round itself is the node's pipeline (``fedrl.node``: receive -> train -> attack -> privatize
-> encode), chosen once per node from the run config together with how the node replies
(``fedrl.flower.replies``); both are cached per run config and node.

A SuperNode may serve several logical nodes (when a simulation has fewer SuperNodes than
``nodes.count``); each logical node's state is its own record in ``context.state``. The
server never sends two plans to one SuperNode at once, so those records cannot race.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from flwr.app import Context, Message, RecordDict

from fedrl.compression.downlink import Downlink
from fedrl.config import from_run_config
from fedrl.flower import codec, secure_client
from fedrl.flower.cohort_codec import decode_cohort, encode_cohort, is_cohort
from fedrl.flower.replies import ReplyKind, reply_for
from fedrl.inject.dropout import maybe_fail
from fedrl.node import NodePipeline, NodeSetup, RoundStart, build_pipeline, node_setup
from fedrl.node.cohort import run_cohort
from fedrl.storage import durable
from fedrl.topology.gossip import Mix
from fedrl.wire import LocalPlan, NodeState

log = logging.getLogger("fedrl")


@dataclass(frozen=True)
class Node:
    """One logical node of a run: its pipeline and how it replies."""

    pipeline: NodePipeline
    reply: ReplyKind


def handle_train(msg: Message, context: Context) -> Message:
    """Train the logical node the plan names for one round and reply (see module doc).

    Raises:
        ValueError: a plan for a node outside ``nodes.count``, or one the node cannot follow
            (``WireError``: malformed, no secure-aggregation keys; ``StaleBase``/``StaleModel``:
            a delta against a model the node does not hold).
    """
    torch.set_num_threads(threads(context.node_config))
    run = _run_key(context)
    if is_cohort(msg.content):
        return Message(_train_cohort(run, msg.content, context), reply_to=msg)
    plan, downlink = codec.decode_plan(msg.content)
    node = _node(run, plan.node)
    start = _round_start(run, node, plan, downlink, msg.content, context)
    update = node.pipeline.run(start)
    _store(context, plan, update.state())
    return Message(node.reply.content(update, msg.content, context), reply_to=msg)


def _round_start(run: str, node: Node, plan: LocalPlan, downlink: Downlink | Mix, content: RecordDict,
                 context: Context) -> RoundStart:
    """Failure injection, the reply kind's check, the node's held state: all before training."""
    maybe_fail(_setup(run).cfg, plan.round, plan.node, "train")
    node.reply.check(content, context, plan.node)
    return RoundStart(plan, downlink, _held_state(context, plan))


def _train_cohort(run: str, content: RecordDict, context: Context) -> RecordDict:
    """A cohort message: every member's round, the training of all in one call (``fedrl.node.cohort``);
    one reply content with each member's reply, or why it failed (it fails alone)."""
    members = decode_cohort(content, _setup(run).cfg.nodes.count)
    replies: list[RecordDict | str] = [""] * len(members)
    ready: list[tuple[int, Node, LocalPlan, RecordDict, RoundStart]] = []
    for j, member in enumerate(members):
        try:
            if isinstance(member, str):
                raise codec.WireError(f"the server sent an error as a plan: {member}")
            plan, downlink = codec.decode_plan(member)
            if any(p.node == plan.node for _, _, p, _, _ in ready):
                raise codec.WireError(f"node {plan.node} appears twice in one cohort")
            node = _node(run, plan.node)
            ready.append((j, node, plan, member, _round_start(run, node, plan, downlink, member, context)))
        except Exception as err:  # noqa: BLE001 - a member's bad plan is its own failure
            replies[j] = _failed(err)
    outcomes = run_cohort([node.pipeline for _, node, _, _, _ in ready], [start for *_, start in ready])
    for (j, node, plan, member, _), outcome in zip(ready, outcomes, strict=True):
        try:
            if isinstance(outcome, Exception):
                raise outcome
            _store(context, plan, outcome.state())
            replies[j] = node.reply.content(outcome, member, context)
        except Exception as err:  # noqa: BLE001
            replies[j] = _failed(err)
    return encode_cohort(replies)


def _failed(err: Exception) -> str:
    log.warning("cohort member failed: %s: %s", type(err).__name__, err)
    return f"{type(err).__name__}: {err}"


def _run_key(context: Context) -> str:
    return json.dumps(dict(context.run_config), sort_keys=True)


@functools.lru_cache(maxsize=4)
def _setup(run_config_json: str) -> NodeSetup:
    return node_setup(from_run_config(json.loads(run_config_json)))


@functools.lru_cache(maxsize=1024)
def _node(run_config_json: str, node: int) -> Node:
    setup = _setup(run_config_json)
    if not 0 <= node < len(setup.variants):
        raise ValueError(f"plan for node {node}, but nodes.count is {len(setup.variants)}")
    return Node(build_pipeline(setup, node), reply_for(setup, node))


def setup(context: Context) -> NodeSetup:
    """The run's node-side settings (cached per run config)."""
    return _setup(_run_key(context))


def threads(node_config: Mapping[str, object]) -> int:
    """Torch threads for local training: the SuperNode's ``--node-config threads=N`` (a device's
    cores), default 1 (the Simulation Engine runs nodes side by side, one core each)."""
    v = node_config.get("threads", 1)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"node config threads must be an int >= 1, got {v!r}")
    return v


def _held_state(context: Context, plan: LocalPlan) -> NodeState:
    """The node's state from ``context.state``; for a restarted SuperNode (nothing there), its
    durable copy (``state-dir``), if any."""
    state = codec.load_node_state(context.state, plan.node)
    return state if state.arrays else _durable_state(context, plan)


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


def _store(context: Context, plan: LocalPlan, state: NodeState) -> None:
    """Keep the node's state in ``context.state`` and, with ``state-dir``, on disk."""
    codec.store_node_state(context.state, plan.node, state)
    where = _state_file(context, plan)
    if where is not None:
        durable.save(where[0], where[1], plan.round, state.arrays)


def handle_query(msg: Message, context: Context) -> Message:
    pid = context.node_config.get("partition-id", -1)
    num = context.node_config.get("num-partitions", 0)
    return Message(codec.encode_hello_reply(int(pid), int(num)), reply_to=msg)  # type: ignore[arg-type]


def handle_secure(stage: str) -> Callable[[Message, Context], Message]:
    """The handler of a secure-aggregation stage message (``keys``, ``mask`` or ``unmask``); a
    cohort message runs the stage for each member, and a member that fails fails alone (each
    logical node stays a party of its own, with its own keys and session)."""
    fn = secure_client.STAGES[stage]

    def handle(msg: Message, context: Context) -> Message:
        cfg = setup(context).cfg
        if not is_cohort(msg.content):
            return Message(fn(msg.content, context, cfg), reply_to=msg)
        replies: list[RecordDict | str] = []
        for member in decode_cohort(msg.content, cfg.nodes.count):
            try:
                if isinstance(member, str):
                    raise codec.WireError(f"the server sent an error as a stage message: {member}")
                replies.append(fn(member, context, cfg))
            except Exception as err:  # noqa: BLE001 - a member's failure is its own
                replies.append(_failed(err))
        return Message(encode_cohort(replies), reply_to=msg)

    return handle
