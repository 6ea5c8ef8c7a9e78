"""The server's side of client-level DP: the mechanisms on the sum, the ledger, the clip norm, the audit.

Plain numpy, no Flower. ``fedrl.server.federation.Federation`` holds one ``ServerPrivacy`` per DP run and
hands it the round's updates (central, local) or unmasked ring sum (distributed).
"""

from __future__ import annotations

import math
import secrets

import numpy as np

from fedrl.privacy.accounting import Ledger
from fedrl.privacy.audit import AuditResult, CanaryAudit
from fedrl.privacy.clipping import clip_parts
from fedrl.privacy.noise import gaussian, private_rng
from fedrl.privacy.plan import PrivacyPlan
from fedrl.privacy.skellam import SkellamLedger


class ServerPrivacy:
    """``plan`` with its running state: the ledger, this round's clip norm (adaptive clipping moves
    it) and the audit's canaries."""

    def __init__(self, plan: PrivacyPlan, n_params: int) -> None:
        self.plan = plan
        self.n_params = n_params
        self.ledger: Ledger | SkellamLedger = plan.new_ledger()
        self.clip = plan.clip
        self._noise_rng = private_rng()
        self.audit = CanaryAudit(plan.audit, n_params, secrets.randbits(64)) if plan.audit else None

    def schedule(self, rnd: int) -> None:
        """Set round ``rnd``'s clip norm when it follows a schedule (``privacy.clip-norm-end``); called
        as round ``rnd - 1`` ends, so ``clip`` is the coming round's whenever it is read (plans,
        records, the checkpoint), as with adaptive clipping, which moves it at the same point."""
        if self.plan.clip_end >= 0:
            self.clip = self.plan.clip_at(rnd)

    def mean(self, deltas: list[np.ndarray], selected: float, rnd: int,
             below: list[float | None] | None = None) -> np.ndarray:
        """DP-FedAvg's server step (McMahan et al. 2018), and one step of the ledger
        (``noised_mean``, then ``account``)."""
        out = self.noised_mean(deltas, selected, rnd, below)
        self.account()
        return out

    def account(self) -> None:
        """One step of the ledger: one more release of a mechanism with ``(z, q)``."""
        self.ledger.step(self.plan.z, self.plan.q)

    def noised_mean(self, deltas: list[np.ndarray], selected: float, rnd: int,
                    below: list[float | None] | None = None) -> np.ndarray:
        """DP-FedAvg's mean of ``deltas`` without the ledger step (a caller releasing several
        disjoint sums in one round, such as the edges of a hierarchy, accounts once).

        Nodes are weighted equally (so one node moves the sum by at most ``C``): central mode clips
        every update to ``C`` again (a node's own clipping is not trusted), adds N(0, (zC)^2) to
        the sum and divides by the number of nodes *selected*, which does not depend on anyone's
        data. Local mode: updates arrive noised; their plain mean is post-processing.

        Adaptive clipping (Andrew et al. 2021): the update noise uses ``z_update`` (see
        ``PrivacyPlan``), and the count of nodes whose update was within the clip norm, plus
        N(0, count_std^2), moves the norm geometrically toward the target quantile. A reply without
        a valid bit counts as clipped (0).
        """
        p = self.plan
        if p.mode == "local":
            total = np.sum(deltas, axis=0, dtype=np.float64)
            out = np.asarray(total / len(deltas), np.float32)
        else:
            total = np.asarray(np.sum([clip_parts(d, self.clip, p.parts)[0] for d in deltas], axis=0, dtype=np.float64))
            if self.audit is not None:  # canary nodes: each an update of norm C, inside the mechanism
                total += self.audit.inject(rnd, self.clip)
            if not p.no_noise:
                total += gaussian(self.n_params, p.z_update * self.clip, self._noise_rng)
            if self.audit is not None:
                self.audit.observe(total, self.clip)
            out = np.asarray(total / max(selected, 1), np.float32)
            if p.adaptive:
                count = sum(b == 1.0 for b in below or []) + float(gaussian(1, p.count_std, self._noise_rng)[0])
                self.clip *= math.exp(-p.clip_lr * (count / max(selected, 1) - p.quantile))
        return out

    def distributed_mean(self, total: np.ndarray, survivors: int, selected: float) -> np.ndarray:
        """Distributed DP: the unmasked ring sum of ``survivors`` nodes (last element: their count) to
        the mean update, divided by the nodes selected as in central mode; one ledger step with the
        noise those nodes added (the server now holds this sum)."""
        d = self.plan.dist
        if d is None:
            raise ValueError("distributed_mean without privacy.mode = distributed")
        self.ledger.step(d.mu_with(survivors), self.plan.q)
        return np.asarray(d.decode_sum(total[:-1]) / selected, np.float32)

    def secure_mean(self, total: np.ndarray, selected: float, account: bool = True) -> np.ndarray:
        """Central DP under secure aggregation: the unmasked sum of the nodes' clipped, quantized
        updates (each weighs 1) plus N(0, (z S)^2), ``S`` = clip norm + quantization slack
        (``PrivacyPlan.sensitivity_at`` this round's clip norm), divided by the nodes selected; one ledger step unless
        ``account`` is False (a round releasing several disjoint sums, one per edge, accounts once
        with ``account()``). The nodes' own clipping is trusted here: the server cannot see an
        update to clip it again."""
        p = self.plan
        out = np.asarray(total, np.float64)
        if not p.no_noise:
            out = out + gaussian(self.n_params, p.z * p.sensitivity_at(self.clip), self._noise_rng)
        if account:
            self.account()
        return np.asarray(out / max(selected, 1), np.float32)

    def epsilon(self) -> float:
        """ε spent so far at ``privacy.delta``."""
        return self.ledger.epsilon()

    def audit_result(self) -> AuditResult | None:
        """The one-run audit's verdict so far (None without ``privacy.audit-canaries`` or rounds)."""
        if self.audit is None or self.audit.rounds == 0:
            return None
        return self.audit.result(self.plan.delta, self.epsilon())

    def budget_allows_next_round(self) -> bool:
        """False when one more released round would take ε above ``privacy.target-epsilon``."""
        return self.plan.budget is None or self.ledger.epsilon(self.plan.next_round_cost()) <= self.plan.budget

    def to_checkpoint(self) -> tuple[dict[str, object], dict[str, np.ndarray]]:
        meta = {"privacy_history": self.ledger.to_list(), "clip_norm": self.clip}
        return meta, (self.audit.to_arrays() if self.audit is not None else {})

    def load_checkpoint(self, meta: dict[str, object], arrays: dict[str, np.ndarray]) -> None:
        """The composition continues (never a fresh accountant); the same canaries, their scores so far."""
        self.ledger.load_list(meta.get("privacy_history", []))  # type: ignore[arg-type]
        self.clip = float(meta.get("clip_norm", self.clip))  # type: ignore[arg-type]
        if self.audit is not None and "audit/meta" in arrays:
            self.audit = CanaryAudit.from_arrays(arrays, self.n_params)
