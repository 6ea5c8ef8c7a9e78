"""ClientApp handlers: decode a plan, train the logical node it names, encode the reply.

A SuperNode may serve several logical nodes (when a simulation has fewer SuperNodes than
``nodes.count``); each logical node's state is its own record in ``context.state``. The
server never sends two plans to one SuperNode at once, so those records cannot race.
"""

from __future__ import annotations

import functools
import json

import torch
from flwr.app import Context, Message

from fedrl.config import Config, from_run_config
from fedrl.envs.make import make_vector_env
from fedrl.envs.spec import parse_kwargs
from fedrl.federation import Reply, policy_spec, variants_of
from fedrl.flower import codec
from fedrl.rl.networks import PolicySpec
from fedrl.rl.train import train_locally


@functools.lru_cache(maxsize=4)
def _setup(run_config_json: str) -> tuple[Config, list[dict[str, float]], PolicySpec]:
    cfg = from_run_config(json.loads(run_config_json))
    variants = variants_of(cfg)
    return cfg, variants, policy_spec(cfg, variants[0])


def setup(context: Context) -> tuple[Config, list[dict[str, float]], PolicySpec]:
    return _setup(json.dumps(dict(context.run_config), sort_keys=True))


def handle_train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)  # one core per node; the engine runs nodes in parallel
    cfg, variants, spec = setup(context)
    plan, weights = codec.decode_plan(msg.content)
    if not 0 <= plan.node < len(variants):
        raise ValueError(f"plan for node {plan.node}, but nodes.count is {len(variants)}")
    envs = make_vector_env(cfg.env.id, [variants[plan.node]] * cfg.algo.num_envs,
                           dict(parse_kwargs(cfg.env.kwargs)))
    try:
        state = codec.load_node_state(context.state, plan.node)
        res = train_locally(spec, weights, envs, cfg.algo, plan, state)
    finally:
        envs.close()
    codec.store_node_state(context.state, plan.node, res.state)
    reply = Reply(plan.node, res.weights, res.env_steps, res.obs_moments, res.metrics)
    return Message(codec.encode_reply(reply), reply_to=msg)


def handle_query(msg: Message, context: Context) -> Message:
    pid = context.node_config.get("partition-id", -1)
    num = context.node_config.get("num-partitions", 0)
    return Message(codec.encode_hello_reply(int(pid), int(num)), reply_to=msg)  # type: ignore[arg-type]

