"""Byzantine nodes for robustness experiments (``attack.*``): who attacks, and what they send.

A Byzantine node trains like any other and then replaces its update before the client pipeline
(clipping, compression), so the attack reaches the server in the same format as an honest update:

- ``sign-flip``: ``-scale x`` its own update (Allen-Zhu et al.; a scaled "inner product" attack);
- ``gaussian``: i.i.d. N(0, scale^2) per coordinate, ignoring its data;
- ``random-action`` (Fan et al., FedPG-BR, NeurIPS 2021): it collects its rollouts with random
  actions instead of its policy's and trains on them as if they were its own, so its update is
  a well-formed PPO step in a useless direction (``ActorCritic.random_action``; not via
  ``attack_update``).

Which nodes attack is fixed for the run: ``attack.nodes`` if given, else ``round(fraction x n)``
nodes drawn with the run's seed.
"""

from __future__ import annotations

import numpy as np

from fedrl.config import Config
from fedrl.errors import ConfigError
from fedrl.seeding import ATTACK, numpy_rng


def attackers(cfg: Config) -> frozenset[int]:
    """The attacking nodes of the run (empty with ``attack.name = none``).

    Raises:
        ConfigError: on a malformed or out-of-range ``attack.nodes``.
    """
    a, n = cfg.attack, cfg.nodes.count
    if a.nodes.strip():
        try:
            ids = [int(s) for s in a.nodes.split(",") if s.strip()]
        except ValueError:
            raise ConfigError("attack.nodes", f"got {a.nodes!r}; must be comma-separated node indices, e.g. '0,3'")
        bad = [i for i in ids if not 0 <= i < n]
        if bad:
            raise ConfigError("attack.nodes", f"nodes {bad} are outside 0..{n - 1} (nodes.count = {n})")
        chosen = frozenset(ids)
    else:
        k = round(a.fraction * n)
        chosen = frozenset(int(i) for i in numpy_rng(cfg.seed, ATTACK).choice(n, k, replace=False)) if k else frozenset()
    if a.name == "none":
        if chosen:
            key = "attack.nodes" if a.nodes.strip() else "attack.fraction"
            raise ConfigError(key, "names attackers but attack.name = none; set attack.name = sign-flip, gaussian "
                                   "or random-action")
        return frozenset()
    return chosen


def attack_update(name: str, delta: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """What a Byzantine node sends instead of its flat update ``delta``."""
    if name == "sign-flip":
        return (-scale * np.asarray(delta, np.float64)).astype(np.float32)
    if name == "gaussian":
        return rng.normal(0.0, scale, np.asarray(delta).size).astype(np.float32)
    raise ValueError(f"unknown attack {name!r}")
