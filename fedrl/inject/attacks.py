"""Hostile nodes for robustness experiments (``attack.*``): who attacks, and what they send.

Byzantine updates: the node trains like any other and then replaces its update before the
client pipeline (clipping, compression), so the attack reaches the server in the same format
as an honest update (``UPDATE_ATTACKS``):

- ``sign-flip``: ``-scale x`` its own update (Allen-Zhu et al.; a scaled "inner product" attack);
- ``gaussian``: i.i.d. N(0, scale^2) per coordinate, ignoring its data;
- ``random-action`` (Fan et al., FedPG-BR, NeurIPS 2021): it collects its rollouts with random
  actions instead of its policy's and trains on them as if they were its own, so its update is
  a well-formed PPO step in a useless direction (``ActorCritic.random_action``; not via
  ``attack_update``).

Poisoned replies (``REPLY_ATTACKS``): the node trains honestly, then lies in a well-formed reply.
Each is stopped by a server check (``fedrl.server.guards``):

- ``huge-weights``: every weight (or every float of its compressed update) is 3.4e38, finite in
  float32; stopped by ``strategy.max-update-norm``; without it the FedAvg mean overflows and the
  non-finite guard keeps the previous model, but under ``local`` and gossip (no mean) the finite
  weights become that node's model, and gossip neighbours mix them in;
- ``nan-weights``: every weight is NaN (the finite-weights check);
- ``lie-steps``: claims 100x the planned env steps, to take ~all of the FedAvg weight (a report
  above the plan is refused);
- ``bad-moments``: observation statistics with a count of inf (odd rounds) or a negative second
  moment (even rounds) (the moments check);
- ``wrong-node``: answers as the next node (the node-id check).

Malformed records (``RECORD_ATTACKS``): the encoded reply is rewritten on the client after
encoding (``fedrl.flower.hostile``), at its first array; they test the reply decoder:

- ``wrong-shape``: an array one row longer than the model's (a payload blob 8 bytes longer);
- ``bad-dtype``: a string array and a datetime64 array in place of float32 weights;
- ``bad-stype``: an ``Array`` whose serialization type is bogus;
- ``npy-bomb``: a ~130-byte ``.npy`` header that declares 10^10 float32 elements;
- ``topk-overflow`` (``compression.up = topk`` only): a top-k payload with twice as many values as
  the model has parameters, all at one repeated index.

Which nodes attack is fixed for the run: ``attack.nodes`` if given, else ``round(fraction x n)``
nodes drawn with the run's seed. ``attack.name`` is one kind for every attacker, or a
comma-separated list matched in order to ``attack.nodes`` (one kind per listed node).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fedrl.errors import ConfigError

if TYPE_CHECKING:
    from fedrl.config import Config

UPDATE_ATTACKS = ("sign-flip", "gaussian", "random-action")
REPLY_ATTACKS = ("huge-weights", "nan-weights", "lie-steps", "bad-moments", "wrong-node")
RECORD_ATTACKS = ("wrong-shape", "bad-dtype", "bad-stype", "npy-bomb", "topk-overflow")
KINDS = UPDATE_ATTACKS + REPLY_ATTACKS + RECORD_ATTACKS
HOSTILE = frozenset(REPLY_ATTACKS + RECORD_ATTACKS)  # applied to the reply, not to the update


def kind_names(value: str) -> list[str]:
    """The kinds ``attack.name`` lists, in order (``["none"]`` for none)."""
    return [s.strip() for s in str(value).split(",") if s.strip()] or ["none"]


def check_names(value: Any) -> str | None:
    """``attack.name``'s range check: ``none``, one kind, or a comma-separated list of kinds."""
    names = kind_names(value)
    if names == ["none"]:
        return None
    bad = [n for n in names if n not in KINDS]
    if bad or "none" in names:
        return (f"{', '.join(bad or ['none'])} is not an attack kind; allowed: none, or one or a comma-separated "
                f"list of {', '.join(KINDS)}")
    return None


def attack_plan(cfg: Config) -> dict[int, str]:
    """Attacking node -> its kind (empty with ``attack.name = none``).

    Raises:
        ConfigError: on a malformed or out-of-range ``attack.nodes``, a list of kinds that does
            not match ``attack.nodes`` one to one, or a kind the run's settings cannot carry.
    """
    a, n = cfg.attack, cfg.nodes.count
    ids: list[int] = []
    if a.nodes.strip():
        try:
            ids = [int(s) for s in a.nodes.split(",") if s.strip()]
        except ValueError:
            raise ConfigError("attack.nodes", f"got {a.nodes!r}; must be comma-separated node indices, e.g. '0,3'")
        bad = [i for i in ids if not 0 <= i < n]
        if bad:
            raise ConfigError("attack.nodes", f"nodes {bad} are outside 0..{n - 1} (nodes.count = {n})")
    else:
        from fedrl.seeding import ATTACK, numpy_rng  # here: fedrl.config imports this module, and seeding imports torch

        k = round(a.fraction * n)
        ids = sorted(int(i) for i in numpy_rng(cfg.seed, ATTACK).choice(n, k, replace=False)) if k else []
    names = kind_names(a.name)
    if names == ["none"]:
        if ids:
            key = "attack.nodes" if a.nodes.strip() else "attack.fraction"
            raise ConfigError(key, "names attackers but attack.name = none; set attack.name = sign-flip, gaussian "
                                   "or random-action")
        return {}
    if len(names) > 1 and (not a.nodes.strip() or len(names) != len(ids) or len(set(ids)) != len(ids)):
        raise ConfigError("attack.name", f"lists {len(names)} kinds; attack.nodes must then list as many distinct "
                                         f"nodes, one per kind in order (got {a.nodes!r})")
    plan = dict(zip(ids, names, strict=True)) if len(names) > 1 else dict.fromkeys(ids, names[0])
    _check_fits(cfg, set(plan.values()))
    return plan


def _check_fits(cfg: Config, kinds: set[str]) -> None:
    if "topk-overflow" in kinds and cfg.compression.up != "topk":
        raise ConfigError("attack.name", f"topk-overflow needs compression.up = topk (got {cfg.compression.up})")
    hostile = sorted(kinds & HOSTILE)
    if hostile and cfg.secagg.enabled:
        raise ConfigError("attack.name", f"{', '.join(hostile)} rewrite a plain reply; with secagg.enabled a node "
                                         "replies with masked shares (use sign-flip, gaussian or random-action)")


def attackers(cfg: Config) -> frozenset[int]:
    """The attacking nodes of the run (empty with ``attack.name = none``); see ``attack_plan``."""
    return frozenset(attack_plan(cfg))


def attack_update(name: str, delta: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """What a Byzantine node sends instead of its flat update ``delta``."""
    if name == "sign-flip":
        return (-scale * np.asarray(delta, np.float64)).astype(np.float32)
    if name == "gaussian":
        return rng.normal(0.0, scale, np.asarray(delta).size).astype(np.float32)
    raise ValueError(f"unknown attack {name!r}")
