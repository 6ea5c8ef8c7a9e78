"""What a node does to its update under client-level DP, before compression."""

from __future__ import annotations

import numpy as np

from fedrl.privacy.clipping import clip_l2
from fedrl.privacy.noise import gaussian, private_rng
from fedrl.privacy.plan import PrivacyPlan

PRIVATE_METRICS = ("train_return",)
"""Per-node metrics that depend on the node's data: not sent under DP (they are not noised)."""


def privatize(delta: np.ndarray, plan: PrivacyPlan) -> np.ndarray:
    """Clip the flat update to ``plan.clip`` (L2); in local mode also add N(0, (z C)^2) per coordinate.

    Local noise comes from :func:`private_rng`: the server, which knows the run's seed, cannot
    replay it.
    """
    out, _ = clip_l2(delta, plan.clip)
    if plan.mode == "local":
        out = out + gaussian(out.size, plan.z * plan.clip, private_rng())
    return out
