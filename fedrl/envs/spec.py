"""Parse the ``env.vary`` and ``env.kwargs`` run-config strings and sample node variants.

Both keys use the form ``"name=value; name=value"`` (``;``-separated, whitespace tolerant,
empty items and a trailing ``;`` ignored) because Flower only accepts declared scalar
run-config keys, so an open-ended group must travel as one string.

``env.vary`` values are *specs*: how one physical parameter differs across the N nodes.

============================  =====================================================
spec                          node ``i`` of ``N`` gets
============================  =====================================================
``0.5``                       0.5 (every node)
``uniform(a, b)``             a draw from U[a, b), ``a < b``
``loguniform(a, b)``          exp of a draw from U[log a, log b), ``0 < a < b``
``linspace(a, b)``            ``np.linspace(a, b, N)[i]`` (``a`` when ``N == 1``)
``choice(a, b, ...)``         one of the listed values, uniformly
============================  =====================================================

Node ``i``'s values are sampled by ``(seed, i)`` alone; ``sample_heldout`` draws *held-out*
variants from the same specs, which no node trains on (``eval.held-out``); its docstring gives
the contract.

This module is the one place callers import from; the work is in two: :mod:`fedrl.envs.parsing`
(the strings -> :class:`ParamSpec` and keyword arguments; nothing evaluates Python) and
:mod:`fedrl.envs.variants` (specs -> each node's values and held-out values).
"""

from __future__ import annotations

from fedrl.envs.parsing import ALLOWED_SPECS, ParamSpec, SpecKind, parse_kwargs, parse_vary
from fedrl.envs.variants import sample_heldout, sample_variant, varies

__all__ = [
    "ALLOWED_SPECS",
    "ParamSpec",
    "SpecKind",
    "parse_kwargs",
    "parse_vary",
    "sample_heldout",
    "sample_variant",
    "varies",
]
