"""Explicit, derived randomness: every random stream is a pure function of integers.

Deriving a stream from (seed, purpose, node, round) instead of carrying generator state
means a resumed run, a node that skipped rounds and a node in another engine all draw the
same numbers, and nothing but the ints has to be checkpointed.
"""

from __future__ import annotations

import numpy as np
import torch

# Purposes keep streams that share (seed, node, round) independent.
ENV_RESET, TRAIN, SELECT, EVAL, INIT, COMPRESS, DROPOUT, SECAGG, ATTACK = 1, 2, 3, 4, 5, 6, 7, 8, 9
# Held-out variants (fedrl.envs.spec.sample_heldout) and their evaluation episodes.
HELDOUT = 10
# The sample of nodes whose variants the server evaluates (eval.nodes).
EVAL_SAMPLE = 11
# The server's own rollouts for observation statistics (algo.norm-obs = server).
OBS_STATS = 12


def derive(*ints: int) -> int:
    """A 31-bit seed from any tuple of non-negative ints (NumPy's SeedSequence hashing)."""
    return int(np.random.SeedSequence([int(i) for i in ints]).generate_state(1)[0] & 0x7FFFFFFF)


def torch_generator(*ints: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(derive(*ints))
    return g


def numpy_rng(*ints: int) -> np.random.Generator:
    return np.random.default_rng(derive(*ints))
