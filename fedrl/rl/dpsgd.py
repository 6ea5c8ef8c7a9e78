"""Sample-level DP in local training: DP-SGD (Abadi et al., CCS 2016) on PPO's minibatches, via Opacus.

**Privacy unit: one rollout segment**, the ``ppo.num-steps`` consecutive transitions one env
copy contributes to one PPO iteration. Per-transition DP would be wrong here: GAE makes a
transition's advantage depend on the rewards after it in the segment, so one changed transition
moves many examples' gradients. A segment's examples depend only on that segment (GAE stops at
its end and bootstraps from the current value function, which is not data), so the segment is
the example Opacus clips:

- a minibatch is a Poisson sample of segments (each with probability ``q = 1 /
  ppo.num-minibatches``), fed as ``[segments, num_steps, ...]``: Opacus' per-sample gradients
  of ``Linear`` layers sum over the extra dimension, so each sample's gradient is its segment's;
- advantages are normalized within each segment (``ppo.norm-adv``), never across the batch;
- each segment's gradient is clipped to ``privacy.dpsgd-clip-norm`` and Gaussian noise of std
  ``dpsgd-noise-multiplier x clip`` is added to the sum (Opacus' ``DPOptimizer``), every step,
  including steps whose sample came out empty;
- every step is one step of Opacus' RDP accountant with (z, q). The node composes *all* its
  steps across rounds (its accountant's history lives in ``context.state``, never a fresh one per
  round): valid for a segment used in any number of iterations, conservative for fresh data.

Settings that would feed raw data into training outside the clipped gradients are refused:
observation and reward normalization (their running statistics), the KL early stop (a
data-dependent number of steps). PPO's global gradient-norm clip is replaced by the per-segment
clip. Noise and sampling come from generators seeded by the operating system.
"""

from __future__ import annotations

import secrets
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from opacus import GradSampleModule
from opacus.accountants import RDPAccountant
from opacus.grad_sample import register_grad_sampler
from opacus.optimizers import DPOptimizer
from opacus.validators import ModuleValidator
from torch import nn

from fedrl.rl.networks import ActorCritic, LogStd
from fedrl.rl.ppo import Batch, PPOHyper, ppo_update
from fedrl.rl.rollout import Rollout

HISTORY_KEY = "dpsgd.history"


@dataclass(frozen=True)
class SampleDP:
    noise_multiplier: float
    clip: float
    delta: float


@register_grad_sampler(LogStd)
def log_std_grad_sample(layer: LogStd, activations: list[torch.Tensor],
                        backprops: torch.Tensor) -> dict[nn.Parameter, torch.Tensor]:
    """Per-sample gradients of the log-std: ``forward`` broadcasts it to every step of a sample,
    so each sample's gradient is its output gradient summed over all but the first (sample) and
    last (action) dimensions."""
    del activations  # the output does not depend on the input's values, only on its shape
    return {layer.log_std: torch.einsum("n...k->nk", backprops)}


def module_errors(model: ActorCritic) -> list[str]:
    """Why Opacus cannot give per-segment gradients of every parameter of ``model`` (empty if it can).

    Opacus' validator first; then one probe step on a dummy batch of two segments, because a
    parameter outside a layer Opacus knows (the state-independent log-std of a Gaussian policy)
    passes the validator but gets no per-sample gradient.
    """
    errors = [str(e) for e in ModuleValidator.validate(model, strict=False)]
    if errors:
        return errors
    spec = model.spec
    obs = torch.zeros((2, 3, spec.obs_dim))
    actions = torch.zeros((2, 3) if spec.action_kind == "discrete" else (2, 3, spec.action_dim))
    gsm = GradSampleModule(model, loss_reduction="mean")
    try:
        logp, ent = model.log_prob_entropy(obs, actions)
        with warnings.catch_warnings():  # "full backward hook ... no inputs require gradients": fine for a probe
            warnings.simplefilter("ignore", UserWarning)
            (logp.mean() + ent.mean() + model.value(obs).mean()).backward()
        names = dict(model.named_parameters())
        missing = [n for n, p in names.items() if getattr(p, "grad_sample", None) is None]
    except (RuntimeError, ValueError, NotImplementedError, TypeError) as err:  # what Opacus raises: "cannot"
        missing = [f"{type(err).__name__}: {err}"]
    finally:
        gsm._close()
        for p in model.parameters():
            p.grad = None
            if hasattr(p, "grad_sample"):
                p.grad_sample = None
    if not missing:
        return []
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    return [f"no per-sample gradient for {', '.join(missing[:3])}{more}"]


def load_accountant(arrays: dict[str, np.ndarray]) -> RDPAccountant:
    acc = RDPAccountant()
    rows = arrays.get(HISTORY_KEY)
    if rows is not None:
        acc.history = [(float(z), float(q), int(n)) for z, q, n in np.asarray(rows, np.float64).reshape(-1, 3)]
    return acc


def save_accountant(acc: RDPAccountant) -> dict[str, np.ndarray]:
    return {HISTORY_KEY: np.asarray([[z, q, n] for z, q, n in acc.history], np.float64).reshape(-1, 3)}


def _segment_major(x: torch.Tensor) -> torch.Tensor:
    """``[T, E, ...]`` -> ``[E, T, ...]``: one row per segment (the privacy unit)."""
    return x.transpose(0, 1).contiguous()


class DPSGDStep:
    """PPO's ``Stepper`` (``fedrl.rl.ppo``) for DP-SGD over rollout segments (see the module doc).

    Opacus' hooks are on the model from construction until ``close()``. Each
    step is a Poisson sample of segments, clipped per segment, noised, and one accountant step.
    """

    normalize_minibatch_adv = False  # normalized within each segment instead

    def __init__(self, model: ActorCritic, optimizer: torch.optim.Optimizer, hp: PPOHyper, dp: SampleDP,
                 accountant: RDPAccountant, segments: int) -> None:
        self.hp, self.dp, self.accountant = hp, dp, accountant
        self.q = 1.0 / hp.num_minibatches
        self.gsm = GradSampleModule(model, loss_reduction="mean")
        noise_gen = torch.Generator().manual_seed(secrets.randbits(63))
        self.sample_gen = torch.Generator().manual_seed(secrets.randbits(63))
        self.dpo = DPOptimizer(optimizer, noise_multiplier=dp.noise_multiplier, max_grad_norm=dp.clip,
                               expected_batch_size=max(1, round(segments * self.q)), loss_reduction="mean",
                               generator=noise_gen)

    def close(self) -> None:
        self.gsm._close()  # remove Opacus' hooks: the model is plain again

    def examples(self, ro: Rollout, adv: torch.Tensor, returns: torch.Tensor) -> Batch:
        if self.hp.norm_adv:  # within each segment (dim 0 is time): examples stay independent
            adv = (adv - adv.mean(dim=0, keepdim=True)) / (adv.std(dim=0, unbiased=False, keepdim=True) + 1e-8)
        return Batch(*(_segment_major(x) for x in (ro.obs, ro.actions, ro.logprobs, ro.values, adv, returns)))

    def epoch(self, n: int) -> Iterator[torch.Tensor]:
        for _ in range(self.hp.num_minibatches):
            yield torch.nonzero(torch.rand(n, generator=self.sample_gen) < self.q).flatten()

    def step(self, model: ActorCritic, loss: torch.Tensor | None) -> None:
        self.dpo.zero_grad(set_to_none=True)
        if loss is None:  # an empty Poisson sample is still a step: noise only
            for p in model.parameters():
                p.grad_sample = torch.zeros((0, *p.shape))  # type: ignore[attr-defined]
        else:
            with warnings.catch_warnings():  # the first layer's input needs no gradient: expected here
                warnings.simplefilter("ignore", UserWarning)
                loss.backward()
        self.dpo.step()
        self.accountant.step(noise_multiplier=self.dp.noise_multiplier, sample_rate=self.q)


# What a DP-SGD update reports (its losses; the rest of PPO's statistics stay on the node).
REPORTED = ("policy_loss", "value_loss", "approx_kl")


def dp_ppo_update(model: ActorCritic, optimizer: torch.optim.Optimizer, ro: Rollout, hp: PPOHyper, dp: SampleDP,
                  accountant: RDPAccountant) -> dict[str, float]:
    """PPO's update (``fedrl.rl.ppo.ppo_update``) on rollout ``ro`` as DP-SGD over segments;
    mutates ``model``, ``optimizer`` (its moments) and ``accountant``; returns the last step's losses."""
    stepper = DPSGDStep(model, optimizer, hp, dp, accountant, segments=ro.obs.shape[1])
    try:
        stats = ppo_update(model, optimizer, ro, hp, torch.Generator(), stepper=stepper)
    finally:
        stepper.close()
    return {k: v for k, v in stats.items() if k in REPORTED}
