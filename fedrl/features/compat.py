"""Feature compatibility as data: what each feature requires and excludes, checked in one loop.

A ``Feature`` is a setting that is on (``secagg.enabled = true``, ``strategy.name = median``,
``compression.up = topk``, ...), named once. It states the ``Rule``s it must obey: ``requires``
(at least one of the named features is on as well) and ``excludes`` (none of them is), each with
the reason and the key a violation names. ``fedrl.features`` declares every feature; ``conflict``
checks the run against all of them, and ``table`` prints them for ``fedrl check --list``.

Order matters only for which error a run that breaks several rules sees first: features are
checked in declaration order, a feature's ``requires`` before its ``excludes``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from fedrl.config import Config, to_flat
from fedrl.errors import ConfigError

Message = Callable[[Config], str]  # the error text, formatted from the run's values


@dataclass(frozen=True)
class Rule:
    """One of ``features`` must be on (a requirement) or none may be (an exclusion)."""

    features: tuple[str, ...]
    key: str  # the key the ConfigError names
    why: str  # the reason, as the table shows it
    message: Message


@dataclass(frozen=True)
class Feature:
    """A setting that is on, with what it needs and what it cannot combine with."""

    name: str
    key: str  # the key ``active`` reads
    when: str  # when it is on, in words: "secagg.enabled = true"
    active: Callable[[Config], bool]
    requires: tuple[Rule, ...] = ()
    excludes: tuple[Rule, ...] = ()


@lru_cache(maxsize=16)
def _flat(cfg: Config) -> dict[str, Any]:
    return to_flat(cfg)


def value(cfg: Config, key: str) -> Any:
    """The value of run-config ``key`` in ``cfg``."""
    return _flat(cfg)[key]


def setting(name: str, key: str, *values: Any, requires: tuple[Rule, ...] = (),
            excludes: tuple[Rule, ...] = ()) -> Feature:
    """A feature that is on when ``key`` takes one of ``values``."""
    shown = [str(v).lower() if isinstance(v, bool) else str(v) for v in values]
    when = f"{key} = {shown[0]}" if len(shown) == 1 else f"{key} in {', '.join(shown)}"
    return Feature(name, key, when, lambda cfg: value(cfg, key) in values, requires, excludes)


def conflict(cfg: Config, features: Iterable[Feature]) -> ConfigError | None:
    """The first rule of an active feature that ``cfg`` breaks, as the error to raise, or None.

    Each feature's ``active`` runs at most once, and only when a rule asks about it (one of them
    builds an environment to learn whether its actions are continuous).
    """
    declared = list(features)
    by_name = {f.name: f for f in declared}
    seen: dict[str, bool] = {}

    def on(name: str) -> bool:
        if name not in seen:
            seen[name] = by_name[name].active(cfg)
        return seen[name]

    for feature in declared:
        if not (feature.requires or feature.excludes) or not on(feature.name):
            continue
        for rule in feature.requires:
            if not any(on(n) for n in rule.features):
                return ConfigError(rule.key, rule.message(cfg))
        for rule in feature.excludes:
            if any(on(n) for n in rule.features):
                return ConfigError(rule.key, rule.message(cfg))
    return None


def declaration_errors(features: Iterable[Feature]) -> list[str]:
    """What is wrong with a list of declarations: a name twice, a rule naming no declared feature."""
    declared = list(features)
    names = [f.name for f in declared]
    out = [f"{n} is declared twice" for n in sorted({n for n in names if names.count(n) > 1})]
    for f in declared:
        for rule in f.requires + f.excludes:
            out += [f"{f.name}: a rule names {n}, which is not declared" for n in rule.features if n not in names]
    return out


def table(features: Iterable[Feature]) -> list[str]:
    """Lines for ``fedrl check --list``: each feature, when it is on, what it requires and excludes
    (with why), and which features exclude it."""
    declared = list(features)
    excluded_by: dict[str, list[str]] = {f.name: [] for f in declared}
    for f in declared:
        for rule in f.excludes:
            for n in rule.features:
                if f.name not in excluded_by[n]:
                    excluded_by[n].append(f.name)
    lines = ["Feature compatibility (declared in fedrl/features/, checked before round 1):"]
    for f in declared:
        lines.append(f"{f.name:<24} on when {f.when}")
        lines += [f"{'':<24}   requires {' or '.join(r.features)} ({r.why})" for r in f.requires]
        lines += [f"{'':<24}   excludes {', '.join(r.features)} ({r.why})" for r in f.excludes]
        if excluded_by[f.name]:
            lines.append(f"{'':<24}   excluded by {', '.join(excluded_by[f.name])}")
    return lines
