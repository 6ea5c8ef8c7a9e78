"""Observation statistics from the server's own rollouts (``algo.norm-obs = server``).

With secure aggregation or differential privacy the nodes' observation statistics cannot
travel: the server must not see one node's counts, means and variances, and they are outside
the clipped, noised update. The variants are public (they are in the run config, and the
server already simulates them to evaluate), so the server can gather the statistics itself:
each round it runs the global policy, sampling actions as the nodes do, on a few variants and
merges what it observes into the statistics it broadcasts. No node data enters them, so they
cost no privacy budget and need no protocol.

Episodes restart every round and run up to ``steps`` steps, so a rollout of at least an
episode's length sees late states too (a CartPole cart that drifts after 300 steps).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from fedrl.envs.batched import make_batched_env
from fedrl.errors import ConfigError
from fedrl.model.moments import Moments, normalize
from fedrl.rl.networks import PolicySpec, set_weights
from fedrl.rl.rollout import to_env_actions
from fedrl.seeding import OBS_STATS, derive, torch_generator


def rollout_moments(
    spec: PolicySpec,
    weights: list[np.ndarray],
    moments: Moments,
    env_id: str,
    variants: Sequence[dict[str, float]],
    env_kwargs: dict[str, object],
    steps: int,
    seed: int,
    rnd: int,
    make_model: Callable[[PolicySpec], nn.Module],
    center: bool = True,
) -> Moments:
    """Moments of the raw observations of ``steps`` vector steps of the policy ``weights`` (acting
    on observations normalized by ``moments``, as a node would) on one sub-env per variant.

    The first observations after reset count too, as on a node. Deterministic in ``(seed, rnd)``:
    resets and action samples derive from them. ``center=False``: moments about zero
    (``algo.norm-obs-center``).
    """
    if steps <= 0 or not variants:
        raise ValueError("need steps > 0 and at least one variant")
    model = make_model(spec)
    set_weights(model, weights)
    gen = torch_generator(seed, OBS_STATS, rnd)
    ids = list(range(len(variants)))
    try:
        return _run(model, moments, env_id, ids, variants, env_kwargs, steps, seed, rnd, gen, center)
    except ConfigError:  # a parameter that changes a space (Pendulum's max_torque): one vector env each
        out = Moments.empty(spec.obs_dim)
        for i in ids:
            out = out.merge(_run(model, moments, env_id, [i], [variants[i]], env_kwargs, steps, seed, rnd, gen, center))
        return out


def _run(model: nn.Module, moments: Moments, env_id: str, ids: list[int], variants: Sequence[dict[str, float]],
         env_kwargs: dict[str, object], steps: int, seed: int, rnd: int, gen: torch.Generator,
         center: bool) -> Moments:
    envs = make_batched_env(env_id, [dict(v) for v in variants], env_kwargs)
    try:
        obs, _ = envs.reset(seed=[derive(seed, OBS_STATS, rnd, i) for i in ids])
        seen = [np.asarray(obs, np.float64)]
        for _ in range(steps - 1):
            with torch.inference_mode():
                action, _ = model.sample(torch.as_tensor(normalize(obs, moments)), gen)  # type: ignore[operator]
            obs, *_ = envs.step(to_env_actions(action.numpy(), envs.single_action_space))
            seen.append(np.asarray(obs, np.float64))
    finally:
        envs.close()
    return Moments.of(np.concatenate(seen), center)
