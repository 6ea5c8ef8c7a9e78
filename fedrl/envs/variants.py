"""Sample node variants and held-out variants from parsed ``env.vary`` specs.

Node ``i`` of ``N`` gets its values by :func:`sample_variant`; :func:`sample_heldout` draws
*held-out* variants from the same specs, which no node trains on (``eval.held-out``). Both are
deterministic in their arguments alone (seeded numpy streams, never ``hash()``), so a variant is
the same in every process, engine and run mode. The spec language: :mod:`fedrl.envs.spec`.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import numpy as np

from fedrl.envs.parsing import ParamSpec
from fedrl.errors import ConfigError
from fedrl.seeding import HELDOUT


def sample_variant(
    specs: dict[str, ParamSpec], node: int, num_nodes: int, seed: int
) -> dict[str, float]:
    """Node ``node``'s parameter values (python floats), in the order of ``specs``.

    Deterministic in ``(seed, node, param name)`` only: each parameter draws from its own
    generator ``default_rng([seed, node, crc32(name)])``, so the result is the same in every
    process, engine and call order, and adding or removing another parameter does not change
    this one's value. ``linspace`` also depends on ``num_nodes``. Requires ``seed >= 0``
    (numpy seed sequences take non-negative integers) and ``0 <= node < num_nodes``.
    """
    if seed < 0:
        raise ValueError(f"seed must be >= 0 to seed numpy's SeedSequence, got {seed}")
    if not 0 <= node < num_nodes:
        raise ValueError(f"node must be in [0, {num_nodes}), got {node}")
    return {name: _sample_one(name, spec, node, num_nodes, seed) for name, spec in specs.items()}


def _sample_one(name: str, spec: ParamSpec, node: int, num_nodes: int, seed: int) -> float:
    if spec.kind == "const":
        return float(spec.args[0])
    if spec.kind == "linspace":
        return float(np.linspace(spec.args[0], spec.args[1], num_nodes)[node])
    # crc32, not hash(): str hashes are salted per process (PYTHONHASHSEED).
    rng = np.random.default_rng([seed, node, zlib.crc32(name.encode("utf-8"))])
    if spec.kind == "uniform":
        return float(rng.uniform(spec.args[0], spec.args[1]))
    if spec.kind == "loguniform":
        a, b = spec.args
        value = math.exp(rng.uniform(math.log(a), math.log(b)))
        # exp(log(b)) can round one ulp past b; keep the documented support.
        return float(min(max(value, a), b))
    return float(spec.args[int(rng.integers(len(spec.args)))])


def varies(spec: ParamSpec) -> bool:
    """Whether nodes can get different values: not a constant, ``linspace(a, a)`` or ``choice(a, a)``."""
    return spec.kind != "const" and len(set(spec.args)) > 1


# A held-out variant equal to a training one is drawn again (only possible when every varying
# parameter is a choice whose values all belong to some node); past this many attempts the
# uncovered combinations are too rare to find by chance. With at most 10,000 nodes and at least
# one uncovered combination, 10^6 attempts all fail with probability below e^-100.
_MAX_ATTEMPTS = 1_000_000


def sample_heldout(
    specs: dict[str, ParamSpec],
    index: int,
    training: Sequence[dict[str, float]],
    seed: int,
    key: str = "eval.held-out",
) -> dict[str, float]:
    """Held-out variant ``index``: drawn from the same ``specs`` as ``training`` (every node's
    variant), on a stream of its own, and equal to none of them.

    Per parameter, in the order of ``specs``:

    - one that does not vary (a number, ``linspace(a, a)``, ``choice(a, a)``) keeps its value:
      fixed parameters stay fixed, only varying ones are redrawn;
    - ``uniform`` and ``loguniform``: a draw from the same distribution;
    - ``linspace(a, b)``: a uniform draw over ``[min(a, b), max(a, b)]``, between and around the
      nodes' grid points;
    - ``choice``: uniformly one of the listed values that no node has, or, when every listed
      value is some node's, one of all the listed values.

    A continuous draw equal to some node's value of that parameter is drawn again, so a variant
    with a varying continuous parameter (or a choice with an unused value) differs from every node
    in that parameter. The variant as a whole always differs from every training variant: one
    equal to a training variant (all varying parameters are choices whose values are all used,
    and the combination is a node's) is drawn again with the next attempt number.

    Each parameter draws from ``default_rng([seed, HELDOUT, index, attempt, crc32(name)])``:
    five words, where node ``i``'s variant uses ``[seed, i, crc32(name)]``, so the two never
    share a stream. The result depends on ``(seed, index, specs, training)`` only: the same in
    every process and call order.

    Raises:
        ConfigError: naming ``key`` when no variant can be held out: no parameter varies, every
            varying parameter is a choice and every combination of their values is a node's, or a
            continuous interval is so narrow (a few floats) that its draws keep hitting nodes' values.
    """
    if seed < 0 or index < 0:
        raise ValueError(f"seed and index must be >= 0, got seed={seed}, index={index}")
    moving = [name for name, spec in specs.items() if varies(spec)]
    if not moving:
        raise ConfigError(key, "env.vary has no parameter that varies across nodes, so every variant is a "
                               "training variant and none can be held out; vary a parameter or set it to 0")
    seen = {tuple(v[name] for name in moving) for v in training}
    used = {name: {v[name] for v in training} for name in moving}
    finite = [s for s in specs.values() if varies(s) and s.kind == "choice"]
    if len(finite) == len(moving) and math.prod(len(set(s.args)) for s in finite) <= len(seen):
        raise ConfigError(key, f"every combination of env.vary's choice values ({', '.join(moving)}) is some "
                               "node's variant, so none can be held out; add values, vary another parameter "
                               "or set it to 0")
    for attempt in range(_MAX_ATTEMPTS):
        variant = {
            name: _heldout_one(name, spec, used.get(name, set()), seed, index, attempt, key) if varies(spec)
            else float(spec.args[0])
            for name, spec in specs.items()
        }
        if tuple(variant[name] for name in moving) not in seen:
            return variant
    raise RuntimeError(f"no held-out variant found in {_MAX_ATTEMPTS} attempts")  # see _MAX_ATTEMPTS


# A continuous draw equal to a node's value is drawn again; an interval so narrow that this many
# draws in a row all hit nodes' values holds (almost) no float that is not one:
# linspace(0.5, 0.5000000000000001) has two, both nodes'.
_MAX_DRAWS = 10_000


def _heldout_one(name: str, spec: ParamSpec, used: set[float], seed: int, index: int, attempt: int,
                 key: str) -> float:
    rng = np.random.default_rng([seed, HELDOUT, index, attempt, zlib.crc32(name.encode("utf-8"))])
    if spec.kind == "choice":
        values = sorted(set(spec.args))
        unused = [v for v in values if v not in used]
        pool = unused or values
        return float(pool[int(rng.integers(len(pool)))])
    a, b = min(spec.args), max(spec.args)
    for _ in range(_MAX_DRAWS):  # a repeat has probability ~0 per draw unless the interval is a few floats wide
        if spec.kind == "loguniform":
            value = min(max(math.exp(rng.uniform(math.log(a), math.log(b))), a), b)
        else:  # uniform, and linspace's interval
            value = float(rng.uniform(a, b))
        if value not in used:
            return float(value)
    raise ConfigError(key, f"env.vary's {name}={spec.to_str()} is too narrow to draw a value no node has, "
                           "so no variant can be held out; widen it or set it to 0")
