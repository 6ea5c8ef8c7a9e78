"""Star rules: one global model, stepped with a mean update.

``Mean``: FedAvg / FedProx weigh each update by its env steps (``fedrl.aggregation.fedavg``;
FedProx differs only on the nodes, by its proximal term); ``fedavgm``, ``fedadagrad``,
``fedadam`` and ``fedyogi`` step the same mean with a server optimizer (Reddi et al., ICLR 2021,
``fedrl.aggregation.server_opt``). ``Robust``: median, trimmed mean, Krum and multi-Krum replace
the mean and ignore the reported weights (``fedrl.aggregation.robust``).
"""

from __future__ import annotations

import logging

import numpy as np

from fedrl.aggregation.fedavg import weighted_mean
from fedrl.aggregation.robust import robust_aggregate
from fedrl.config import Config
from fedrl.model.layout import flatten, unflatten
from fedrl.rules.base import Model, RuleSetup, ServerRule, Update

log = logging.getLogger("fedrl")

SERVER_OPTIMIZERS = ("fedavgm", "fedadagrad", "fedadam", "fedyogi")


class Mean(ServerRule):
    """FedAvg, FedProx, or a server optimizer (``strategy.name``) on the env-step-weighted mean."""

    accepts_sums = True
    privatizable = True

    def __init__(self, setup: RuleSetup) -> None:
        name = setup.cfg.strategy.name
        super().__init__(setup, optimizer=name if name in SERVER_OPTIMIZERS else "fedavg")

    def mean(self, updates: list[Update], rnd: int) -> Model | None:
        """The round's mean update (None: leave the model as it is)."""
        return weighted_mean([u.delta for u in updates], [u.reply.env_steps for u in updates])

    def aggregate(self, updates: list[Update], rnd: int) -> None:
        if not updates:
            return
        mean = self.mean(updates, rnd)
        if mean is not None:
            self.step(mean, rnd)
        self.merge_moments(0, [u.reply for u in updates])


class FedProx(Mean):
    """FedAvg's server side; each node's local objective gets FedProx's proximal term toward the
    weights it is sent, ``strategy.proximal-mu`` (Li et al., MLSys 2020)."""

    @classmethod
    def local_mu(cls, cfg: Config) -> float:
        return cfg.strategy.proximal_mu


class Robust(Mean):
    """A robust rule (``strategy.name``: median, trimmed-mean, krum, multi-krum) in place of the mean.

    Weights are ignored: a Byzantine node could lie about its env steps. ``strategy.byzantine``
    (default: the attackers set in ``attack.*``) is the f the rule tolerates."""

    accepts_sums = False  # it looks at each update, which masking hides
    privatizable = False
    not_privatizable = "the noise is calibrated to the sensitivity of a sum, not of a robust rule"
    no_sums = "a robust rule looks at each update (medians, distances), which masking hides"

    def __init__(self, setup: RuleSetup) -> None:
        super().__init__(setup)
        s = setup.cfg.strategy
        self.byzantine = s.byzantine if s.byzantine >= 0 else len(setup.attackers)

    def mean(self, updates: list[Update], rnd: int) -> Model | None:
        s = self.cfg.strategy
        try:
            flat = robust_aggregate(s.name, np.stack([flatten(u.delta) for u in updates]), self.byzantine, s.trim,
                                    s.krum_m)
        except ValueError as err:  # too few replies this round for the rule's guarantee
            log.warning("round %s: %s with %d replies: %s; the model is unchanged", rnd, s.name, len(updates), err)
            return None
        return unflatten(flat, self.models[0])
