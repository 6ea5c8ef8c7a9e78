"""The server-rule registry: a rule's name -> a factory ``(RuleSetup) -> ServerRule``.

The rule a run uses is named by ``topology.name`` when it is not ``star`` (``hierarchical``,
``gossip``), else by ``strategy.name``. A plain dict, as Opacus' accountant registry;
``register`` adds one more from any module (a test file, a user's package imported before the
run starts). Built-in rules load on first use, so parsing a config imports none of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedrl.config import Config
    from fedrl.rules.base import RuleSetup, ServerRule

    Factory = Callable[[RuleSetup], ServerRule]

_STAR = "fedrl.rules.star:"
_REGISTRY: dict[str, Any] = {
    "fedavg": _STAR + "Mean",
    "fedprox": _STAR + "FedProx",  # the order here is the order errors and --list name them
    **{n: _STAR + "Mean" for n in ("fedavgm", "fedadagrad", "fedadam", "fedyogi")},
    **{n: _STAR + "Robust" for n in ("median", "trimmed-mean", "krum", "multi-krum")},
    "fedbuff": "fedrl.rules.asynchronous:FedBuff",
    "fedasync": "fedrl.rules.asynchronous:FedAsync",
    "local": "fedrl.rules.per_node:Local",
}
_TOPOLOGIES: dict[str, str] = {
    "hierarchical": "fedrl.rules.hierarchical:Hierarchical",
    "gossip": "fedrl.rules.per_node:Gossip",
}
BUILTIN = frozenset(_REGISTRY)


def register(name: str, factory: Factory | str) -> None:
    """Make ``strategy.name = name`` build its rule with ``factory`` (a class or callable taking a
    ``RuleSetup``, or ``"module:attribute"``). Re-registering a name replaces it."""
    if not name or not name.replace("-", "").isalnum():
        raise ValueError(f"a rule name is letters, digits and '-', got {name!r}")
    _REGISTRY[name] = factory


def unregister(name: str) -> None:
    if name in BUILTIN:
        raise ValueError(f"the built-in rule {name} cannot be unregistered")
    _REGISTRY.pop(name, None)


def names(topologies: bool = False) -> tuple[str, ...]:
    """The registered ``strategy.name`` values (and with ``topologies`` the topologies' rules)."""
    return tuple(_REGISTRY) + (tuple(_TOPOLOGIES) if topologies else ())


def _load(entry: Any) -> Any:
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        return getattr(importlib.import_module(module), attr)
    return entry


def rule_name(cfg: Config) -> str:
    """The registry key of the run's rule (see the module doc)."""
    t = cfg.topology.name
    return t if t != "star" else cfg.strategy.name


def declared(name: str) -> Any:
    """What is registered for rule ``name`` (topology names included), loaded: a class, or a factory,
    whose attributes declare the rule's capabilities (``fedrl.features.components``)."""
    entry = _TOPOLOGIES.get(name) or _REGISTRY.get(name)
    if entry is None:
        raise KeyError(f"no server rule {name!r}; registered: {', '.join(_REGISTRY)}")
    return _load(entry)


def build(setup: RuleSetup) -> ServerRule:
    """The run's rule, built from ``setup`` (``topology.name``, else ``strategy.name``)."""
    return declared(rule_name(setup.cfg))(setup)  # type: ignore[no-any-return]


def check_name(value: Any) -> str | None:
    """A config check (``fedrl.config.checks.Check``) for ``strategy.name``."""
    return None if value in _REGISTRY else f"allowed: {', '.join(_REGISTRY)}"
