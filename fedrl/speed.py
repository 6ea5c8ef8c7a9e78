"""Simulated compute heterogeneity for experiments (``nodes.speed``).

Node i's slowdown factor is drawn once from the ``nodes.speed`` spec (the ``env.vary`` grammar
for one parameter: a number, ``uniform(a, b)``, ``loguniform(a, b)``, ``linspace(a, b)``,
``choice(...)``), seeded by (seed, node), so every process and rerun agrees. A node with factor
f > 1 sleeps (f - 1) times its measured training time before it replies, i.e. it behaves like a
device f times slower. The sleep is real: round times, deadlines and asynchronous staleness all
see it.
"""

from __future__ import annotations

from fedrl.config import Config
from fedrl.envs.spec import parse_vary, sample_variant
from fedrl.errors import ConfigError

_NAME = "slowdown"


def slowdown(cfg: Config, node: int) -> float:
    """Node ``node``'s slowdown factor (1: full speed)."""
    spec = parse_vary(f"{_NAME}={cfg.nodes.speed}", key="nodes.speed")
    return sample_variant(spec, node, cfg.nodes.count, cfg.seed)[_NAME]


def check(cfg: Config) -> None:
    """Raises ConfigError naming ``nodes.speed`` when the spec is malformed or a factor is below 1."""
    low, high = parse_vary(f"{_NAME}={cfg.nodes.speed}", key="nodes.speed")[_NAME].bounds()
    if not (low >= 1.0 and high < 1e4):
        raise ConfigError("nodes.speed", f"slowdown factors must lie in [1, 10000); {cfg.nodes.speed!r} spans "
                                         f"[{low:g}, {high:g}]")
