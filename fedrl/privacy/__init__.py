"""Client-level differential privacy: clipping, Gaussian noise, accounting (no Flower here)."""

from fedrl.privacy.accounting import Ledger, epsilon_after, noise_for_target
from fedrl.privacy.clipping import clip_l2
from fedrl.privacy.noise import gaussian, private_rng

__all__ = ["Ledger", "clip_l2", "epsilon_after", "gaussian", "noise_for_target", "private_rng"]
