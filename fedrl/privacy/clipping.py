"""L2 clipping of a node's whole update (McMahan et al., ICLR 2018: the unit is the node), or of
its parts apart (``privacy.actor-share``; per-layer clipping, same paper, section 3).

Clipping parts ``j`` to ``C f_j`` with ``sum_j f_j^2 = 1`` keeps the whole update within ``C``, so
the sensitivity, the noise and ε are those of one clip to ``C``. Why split: a PPO node's update
is mostly its critic's (measured on heterogeneous CartPole, 64x64: critic norm 1.45 to 1.67 of a
total 1.74 to 1.80 in round 1), so one clip leaves the actor, the part the policy acts with, a
small share of the bound while the noise falls on every weight alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fedrl.errors import ConfigError

if TYPE_CHECKING:
    from fedrl.config.features import PrivacyConfig

Parts = tuple[tuple[tuple[tuple[int, int], ...], float], ...]
"""``(slices, f)`` per part of the flat update: the values in its ``(start, stop)`` slices are
clipped together to ``C f``."""


def clip_l2(vec: np.ndarray, clip_norm: float) -> tuple[np.ndarray, float]:
    """``(vec * min(1, clip_norm / ||vec||_2), ||vec||_2)`` as float32; the result's norm is at most ``clip_norm``.

    The factor is computed in float64 and shrunk by a relative 1e-6 so that float32 rounding can
    never lift the clipped norm above the bound the sensitivity analysis assumes.

    Raises:
        ValueError: on a non-positive ``clip_norm`` or a non-finite ``vec``.
    """
    if not clip_norm > 0:
        raise ValueError(f"clip_norm must be > 0, got {clip_norm!r}")
    v = np.asarray(vec, np.float32)
    norm = float(np.linalg.norm(v.astype(np.float64)))
    if not np.isfinite(norm):
        raise ValueError("the update has non-finite values")
    if norm <= clip_norm:
        return v.copy(), norm
    factor = clip_norm / norm * (1.0 - 1e-6)
    return (v.astype(np.float64) * factor).astype(np.float32), norm


def clip_parts(vec: np.ndarray, clip_norm: float, parts: Parts) -> tuple[np.ndarray, float]:
    """Each part of ``vec`` clipped to ``clip_norm * f`` (``clip_l2``); with no parts, ``clip_l2``.
    Returns the update and the norm of the whole before clipping.

    Raises:
        ValueError: as ``clip_l2``, or if the parts do not cover ``vec``.
    """
    if not parts:
        return clip_l2(vec, clip_norm)
    v = np.asarray(vec, np.float32)
    index = [np.concatenate([np.arange(a, b) for a, b in slices]) for slices, _ in parts]
    if sum(i.size for i in index) != v.size:  # disjoint by construction (actor_critic_parts)
        raise ValueError(f"the clip parts cover {sum(i.size for i in index)} values of {v.size}")
    norm = float(np.linalg.norm(v.astype(np.float64)))
    if not np.isfinite(norm):
        raise ValueError("the update has non-finite values")
    out = np.empty_like(v)
    for idx, (_, f) in zip(index, parts, strict=True):
        out[idx] = clip_l2(v[idx], clip_norm * f)[0]
    return out, norm


def actor_critic_parts(layout: Sequence[tuple[str, int]], share: float) -> Parts:
    """``privacy.actor-share = share``: the parts of a flat actor-critic update (``layout``: each
    weight's name and size, in order): the actor's weights (``actor.*``, ``log_std``) at
    ``sqrt(share)``, the rest (the critic's) at ``sqrt(1 - share)``; ``()`` when ``share`` is 0.

    Raises:
        ConfigError: ``privacy.actor-share`` when the model has no actor or no critic weights.
    """
    if share <= 0:
        return ()
    slices: dict[bool, list[tuple[int, int]]] = {True: [], False: []}
    at = 0
    for name, size in layout:
        slices[name.startswith(("actor.", "log_std"))].append((at, at + size))
        at += size
    if not slices[True] or not slices[False]:
        raise ConfigError("privacy.actor-share", "needs a model with actor (actor.*) and critic weights, as ppo's "
                                                 "ActorCritic; set it to 0 for this algorithm")
    return ((tuple(slices[True]), float(np.sqrt(share))), (tuple(slices[False]), float(np.sqrt(1.0 - share))))


def parts_for(p: PrivacyConfig, layout: Sequence[tuple[str, int]]) -> Parts:
    """The run's clip parts (``privacy.actor-share``), refused where the whole update's norm is
    what the mechanism reads.

    Raises:
        ConfigError: ``privacy.actor-share`` with adaptive clipping (each node reports whether its
            whole update was within C), the audit (its canaries are whole updates of norm C), or
            distributed DP (not wired: its coding clips the whole update), or a model without an
            actor and a critic.
    """
    if p.actor_share <= 0:
        return ()
    why = ("privacy.adaptive-clip = true: the clip norm follows whether whole updates were within it" if
           p.adaptive_clip else "privacy.audit-canaries: the canaries are whole updates of norm C" if
           p.audit_canaries > 0 else "privacy.mode = distributed: its coding clips the whole update" if
           p.mode == "distributed" else "")
    if why:
        raise ConfigError("privacy.actor-share", f"cannot be used with {why}; set it to 0")
    return actor_critic_parts(layout, p.actor_share)
