"""What a node does to its update under client-level DP, before compression."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from fedrl.privacy.clipping import clip_parts
from fedrl.privacy.noise import gaussian, private_rng
from fedrl.privacy.plan import PrivacyPlan

PRIVATE_METRICS = ("train_return",)
"""Per-node metrics that depend on the node's data: not sent under DP (they are not noised)."""


def dpsgd_field(metrics: Iterable[Mapping[str, Any] | None]) -> dict[str, float]:
    """``{"dpsgd_epsilon": the most any node has spent}`` over nodes' metrics or metrics rows, or ``{}``."""
    eps = [float(m["dpsgd_epsilon"]) for m in metrics if m and m.get("dpsgd_epsilon") is not None]
    return {"dpsgd_epsilon": max(eps)} if eps else {}


def privatize(delta: np.ndarray, plan: PrivacyPlan, clip: float | None = None) -> tuple[np.ndarray, bool]:
    """Clip the flat update to ``clip`` (default ``plan.clip``; L2; with ``plan.parts`` each part to its
    share, ``fedrl.privacy.clipping``); in local mode also add N(0, (z C)^2).

    Returns the update and whether it was within the bound before clipping (the bit adaptive
    clipping counts). Local noise comes from :func:`private_rng`: the server, which knows the
    run's seed, cannot replay it.
    """
    bound = plan.clip if clip is None or clip <= 0 else clip
    out, norm = clip_parts(delta, bound, plan.parts)
    if plan.mode == "local":
        out = out + gaussian(out.size, plan.z * bound, private_rng())
    return out, norm <= bound
