"""Simulated compute heterogeneity for experiments (``nodes.speed``).

Node i's slowdown factor is drawn once from the ``nodes.speed`` spec (the ``env.vary`` grammar
for one parameter: a number, ``uniform(a, b)``, ``loguniform(a, b)``, ``linspace(a, b)``,
``choice(...)``), seeded by (seed, node), so every process and rerun agrees, or listed per node
(``"1,1,4"``). A node with factor
f > 1 sleeps (f - 1) times its measured training time before it replies, i.e. it behaves like a
device f times slower. The sleep is real: round times, deadlines and asynchronous staleness all
see it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedrl.envs.spec import parse_vary, sample_variant
from fedrl.errors import ConfigError

if TYPE_CHECKING:
    from fedrl.config import Config

_NAME = "slowdown"


def _explicit(text: str) -> list[float] | None:
    """One factor per node (``"1,1,4"``), or None for a distribution spec."""
    if "," not in text or "(" in text:
        return None
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise ConfigError("nodes.speed", f"{text!r}: one number per node, e.g. '1,1,4'") from None


def slowdown(cfg: Config, node: int) -> float:
    """Node ``node``'s slowdown factor (1: full speed)."""
    listed = _explicit(cfg.nodes.speed)
    if listed is not None:
        return listed[node]
    spec = parse_vary(f"{_NAME}={cfg.nodes.speed}", key="nodes.speed")
    return sample_variant(spec, node, cfg.nodes.count, cfg.seed)[_NAME]


def check(cfg: Config) -> None:
    """Raises ConfigError naming ``nodes.speed`` when the spec is malformed or a factor is below 1."""
    listed = _explicit(cfg.nodes.speed)
    if listed is not None and len(listed) != cfg.nodes.count:
        raise ConfigError("nodes.speed", f"{cfg.nodes.speed!r} lists {len(listed)} factors for "
                                         f"nodes.count = {cfg.nodes.count} nodes")
    low, high = ((min(listed), max(listed)) if listed is not None
                 else parse_vary(f"{_NAME}={cfg.nodes.speed}", key="nodes.speed")[_NAME].bounds())
    if not (low >= 1.0 and high < 1e4):
        raise ConfigError("nodes.speed", f"slowdown factors must lie in [1, 10000); {cfg.nodes.speed!r} spans "
                                         f"[{low:g}, {high:g}]")
