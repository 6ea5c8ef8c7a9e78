"""The algorithm registry: ``algo.name`` -> an ``Algorithm`` (``fedrl.algorithms.base``).

A plain dict, as Opacus' accountant registry. Built-in algorithms are registered by their
import path and loaded on first use, so parsing a config (which checks ``algo.name`` against
this registry) imports neither torch nor any learner. ``register`` adds one more, from any
module (a test file, a user's package imported before the run starts):

    register("reinforce", Reinforce())         # an instance
    register("ppo", "fedrl.algorithms.ppo:PPO")  # or "module:attribute", loaded lazily

In the Simulation and Deployment Engines the ClientApp and ServerApp are separate processes:
an algorithm registered from outside fedrl must be registered on import of a module both load.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedrl.algorithms.base import Algorithm

_REGISTRY: dict[str, Any] = {"ppo": "fedrl.algorithms.ppo:PPO", "dqn": "fedrl.algorithms.dqn:DQN",
                             "sac": "fedrl.algorithms.sac:SAC"}


def register(name: str, algorithm: Algorithm | str) -> None:
    """Make ``algo.name = name`` mean ``algorithm`` (an instance, or ``"module:attribute"`` of a
    class or instance). Re-registering a name replaces it."""
    if not name or not name.replace("-", "").isalnum():
        raise ValueError(f"an algorithm name is letters, digits and '-', got {name!r}")
    _REGISTRY[name] = algorithm


def unregister(name: str) -> None:
    """Forget ``name`` (tests that registered one of their own clean up with this)."""
    if name in ("ppo", "dqn", "sac"):
        raise ValueError(f"the built-in {name} cannot be unregistered")
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get(name: str) -> Algorithm:
    """The algorithm registered as ``name``; KeyError naming the known ones otherwise."""
    try:
        entry = _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no algorithm {name!r}; registered: {', '.join(_REGISTRY)}") from None
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        loaded = getattr(importlib.import_module(module), attr)
        entry = loaded() if isinstance(loaded, type) else loaded
        _REGISTRY[name] = entry
    return entry  # type: ignore[no-any-return]


def check_name(value: Any) -> str | None:
    """A config check (``fedrl.config.checks.Check``) for ``algo.name``."""
    return None if value in _REGISTRY else f"allowed: {', '.join(_REGISTRY)}"
