"""Server-side evaluation of a federation's models, without Flower.

Greedy policies on fixed-seed episodes (``fedrl.rl.evaluate``): the model the run stands for
on every node's variant, each node's own model on its variant (``local``, gossip), every node's
model on every variant (the cross table), and the ``eval.held-out`` variants no node trains on
(episode seeds from ``(seed, HELDOUT)``, apart from the nodes' evaluation episodes). With
``eval.nodes = N`` every "node's variant" above means the variants of ``nodes``: N nodes drawn
by ``(seed, EVAL_SAMPLE)`` once, for the whole run (``eval_nodes``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from fedrl.config import Config
from fedrl.envs.spec import parse_kwargs
from fedrl.experiment import heldout_variants_of, target_return
from fedrl.model.moments import Moments
from fedrl.rl.evaluate import evaluate
from fedrl.seeding import EVAL_SAMPLE, HELDOUT, derive, numpy_rng

if TYPE_CHECKING:
    from torch import nn

    from fedrl.rl.networks import PolicySpec

Model = list[np.ndarray]


def eval_nodes(cfg: Config) -> list[int]:
    """The nodes whose variants the server evaluates: all, or ``eval.nodes`` of them drawn by seed (sorted)."""
    n, k = cfg.nodes.count, cfg.eval.nodes
    if k <= 0 or k >= n:
        return list(range(n))
    return sorted(int(i) for i in numpy_rng(cfg.seed, EVAL_SAMPLE).choice(n, size=k, replace=False))


class Evaluation:
    def __init__(self, cfg: Config, spec: PolicySpec, variants: list[dict[str, float]],
                 make_model: Callable[[PolicySpec], nn.Module]) -> None:
        self.cfg, self.spec, self.variants, self.make_model = cfg, spec, variants, make_model
        self.heldout = heldout_variants_of(cfg, variants)  # eval.held-out: no node trains on these
        self.kwargs: dict[str, object] = dict(parse_kwargs(cfg.env.kwargs))
        self.target = target_return(cfg)
        self.nodes = eval_nodes(cfg)  # whose variants "every variant" means (eval.nodes)

    def _run(self, model: Model, moments: Moments | None, variants: list[dict[str, float]], seed: int,
             nodes: list[int] | None = None) -> list[float]:
        c = self.cfg
        return evaluate(self.spec, model, moments, c.env.id, variants, self.kwargs, c.eval.episodes, seed,
                        nodes=nodes, make_model=self.make_model)

    def on_variants(self, model: Model, moments: Moments | None) -> list[float]:
        """``model`` on the variant of each node in ``nodes``."""
        return self._run(model, moments, [self.variants[i] for i in self.nodes], self.cfg.seed, nodes=self.nodes)

    def each_own(self, models: list[Model], moments: list[Moments | None]) -> list[float]:
        """For each node i in ``nodes``: node i's model on variant i."""
        return [self._run(models[i], moments[i], [self.variants[i]], self.cfg.seed, nodes=[i])[0]
                for i in self.nodes]

    def cross(self, models: list[Model], moments: list[Moments | None]) -> list[list[float]]:
        """For each node i in ``nodes``, a row: node i's model on the variant of each node in ``nodes``."""
        return [self.on_variants(models[i], moments[i]) for i in self.nodes]

    def observe(self, model: Model, moments: Moments, rnd: int) -> Moments:
        """Observation statistics of ``model`` acting (sampling, as nodes do) for ``algo.local-steps``
        steps on ``algo.num-envs`` of the evaluated variants, a different few each round
        (``algo.norm-obs = server``; ``fedrl.rl.obs_stats``: public variants, no node data)."""
        from fedrl.rl.obs_stats import rollout_moments

        a, pool = self.cfg.algo, self.nodes
        picked = [self.variants[pool[(rnd * a.num_envs + j) % len(pool)]] for j in range(a.num_envs)]
        return rollout_moments(self.spec, model, moments, self.cfg.env.id, picked, self.kwargs, a.local_steps,
                               self.cfg.seed, rnd, self.make_model, a.norm_obs_center)

    def on_heldout(self, model: Model, moments: Moments | None) -> list[float]:
        """``model`` on each held-out variant ([] when ``eval.held-out`` is 0)."""
        if not self.heldout:
            return []
        return self._run(model, moments, self.heldout, derive(self.cfg.seed, HELDOUT))
