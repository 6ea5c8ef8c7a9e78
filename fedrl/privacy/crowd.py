"""How loud a client-level DP run's noise is next to what it hides, before round 1.

The ratio is the L2 norm of the noise that one model step receives over the norm of one clipped
update (the clip norm C). It is a rough guide to whether a DP run can learn, and it depends on the
crowd: the noise on a mean of n clipped updates has std z·S/n per weight (S: the sensitivity, C
plus any rounding), so its norm over d weights is about z·S·sqrt(d)/n, while the mean of
agreeing updates keeps a norm of up to C. Local DP noises every update, so the mean holds n
independent draws: z·sqrt(d)/sqrt(n). Measured on heterogeneous CartPole (docs/privacy.md,
"When DP learns"), every run that solved had a ratio of about 1 or less, and none above 2 solved.

Pure arithmetic (and the sentence a config's plan ends with): no Flower, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fedrl.topology.graphs import graph, metropolis_hastings

if TYPE_CHECKING:
    from fedrl.config import Config

NO_SOLVE_ABOVE = 2.0  # no measured run with a larger ratio solved heterogeneous CartPole (docs/privacy.md)


def central_ratio(z: float, sensitivity: float, clip: float, dim: int, nodes: int, edges: int = 1) -> float:
    """Central DP: the noise on one step's mean of ``nodes`` updates (split over ``edges`` edges,
    each of which noises its own sum and divides by its own share) against one clipped update."""
    per_step = nodes / edges
    return z * sensitivity * math.sqrt(dim) / (per_step * clip)


def local_ratio(z: float, dim: int, nodes: int, edges: int = 1) -> float:
    """Local DP: every node adds N(0, (zC)^2) per weight, so a plain mean of its ``nodes / edges``
    updates holds that many independent draws."""
    return z * math.sqrt(dim) / math.sqrt(nodes / edges)


def gossip_ratio(z: float, dim: int, mixing: Sequence[Sequence[float]]) -> float:
    """Local DP under gossip: node i's next model mixes its neighbours' noised updates with the
    weights of row i of ``mixing``, so its noise has std zC·||W_i|| per weight; the worst node's."""
    return z * math.sqrt(dim) * max(math.sqrt(sum(w * w for w in row)) for row in mixing)


def crowd_line(ratio: float, how: str) -> str:
    """The run's first lines: the ratio, how it was computed, and what it predicts."""
    verdict = (f" No measured run with a ratio above {NO_SOLVE_ABOVE:g} solved CartPole: expect little learning; more "
               "nodes per step, a smaller network or a looser ε lower it." if ratio > NO_SOLVE_ABOVE else "")
    return (f"Noise to signal: a step's noise has about {ratio:.3g}x the L2 norm of one clipped update ({how}); "
            f"docs/privacy.md ('When DP learns') lists measured runs by this ratio.{verdict}")


def crowd_sentence(cfg: Config, dim: int, z: float, sensitivity: float) -> str:
    """The noise-to-signal sentence of the run's first lines: a step's
    noise against one clipped update, for the run's topology, nodes per step and mode."""
    p, t = cfg.privacy, cfg.topology
    if t.name == "gossip":  # local DP only (central and distributed are refused under gossip)
        mixing = metropolis_hastings(graph(t.graph, cfg.nodes.count, 1, t.degree, cfg.seed)).tolist()
        return crowd_line(gossip_ratio(z, dim, mixing), f"z x sqrt({dim} weights) x the worst node's mixing-weight "
                                                          f"norm on the {t.graph} graph")
    n = cfg.strategy.buffer if cfg.strategy.name == "fedbuff" else cfg.nodes_per_round
    edges = t.edges if t.name == "hierarchical" else 1
    what = "the buffer's" if cfg.strategy.name == "fedbuff" else "a round's"
    split = f" split over {edges} edges, each noising its own" if edges > 1 else ""
    if p.mode == "local":
        return crowd_line(local_ratio(z, dim, n, edges),
                          f"z x sqrt({dim} weights) / sqrt({n / edges:g}), {what} {n} nodes{split} mean")
    return crowd_line(central_ratio(z, sensitivity, p.clip_norm, dim, n, edges),
                      f"z x {sensitivity / p.clip_norm:.3g} x sqrt({dim} weights) / {n / edges:g}: {what} {n} "
                      f"nodes{split} sum")
