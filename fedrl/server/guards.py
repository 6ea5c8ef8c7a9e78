"""The server's checks on what a node claims and on what aggregation makes of it.

A reply is data from a possibly hostile node (docs/security.md). Beyond the wire decoder's
checks (``fedrl.flower.codec``), the server trusts nothing a reply *says*:

- its weight is the env steps the server planned: a node may report fewer (the weight is then
  what it reports), never more; a report above the plan is refused, so a node cannot buy the
  FedAvg mean by claiming more work;
- its observation statistics describe exactly the steps it trained (count = env steps), with
  finite means and finite, non-negative second moments;
- with ``strategy.max-update-norm`` > 0, an update longer than that (L2, float64) is left out.

And whatever replies pass, aggregation may still overflow: ``nonfinite_slots`` finds a model or
statistics left non-finite, the rule gives back its saved state (``ServerRule.save``/``restore``,
``Federation.guarded``) and the round is recorded as failed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from fedrl.model.layout import flatten
from fedrl.model.moments import Moments
from fedrl.rl.networks import check_weights

if TYPE_CHECKING:
    from collections.abc import Callable

    from fedrl.rules.base import ServerRule
    from fedrl.server.federation import Federation
    from fedrl.wire import Reply


MAX_OBS_MEAN = 1e6  # |mean| of any observation coordinate a node may report (variance: its square)


def steps_problem(reported: int, planned: int) -> str | None:
    """Why a reported env-step count cannot be the reply's weight (None: it can)."""
    if isinstance(reported, bool) or not isinstance(reported, (int, np.integer)):
        return f"env_steps must be an int, got {type(reported).__name__}"
    if reported <= 0:
        return f"env_steps {reported} must be positive"
    if reported > planned:
        return f"claims {reported} env steps, the plan asked for {planned} (algo.local-steps)"
    return None


def moments_problem(m: Moments | None, obs_on: bool, dim: int, steps: int, centred: bool = True) -> str | None:
    """Why a reply's observation statistics are unusable (None: usable, or off and absent).

    Honest nodes report the moments of exactly the ``steps`` observations they trained on, about
    zero (mean 0) when ``centred`` is False (``algo.norm-obs-center = false``).
    """
    if not obs_on:
        return None if m is None else "sent observation statistics, but nodes send none (algo.norm-obs is off or server)"
    if m is None:
        return "missing or malformed observation statistics"
    if np.shape(m.mean) != (dim,) or np.shape(m.m2) != (dim,):
        return f"observation statistics of shape {np.shape(m.mean)}/{np.shape(m.m2)}, expected ({dim},)"
    if not (np.issubdtype(np.asarray(m.mean).dtype, np.floating) and np.issubdtype(np.asarray(m.m2).dtype,
                                                                                   np.floating)):
        return "observation statistics must be floats"
    if float(m.count) != float(steps):
        return f"observation count {m.count!r} differs from the {steps} env steps it trained"
    if not bool(np.all(np.isfinite(m.mean))):
        return "non-finite observation means"
    if not (bool(np.all(np.isfinite(m.m2))) and bool(np.all(m.m2 >= 0))):
        return "observation second moments must be finite and >= 0"
    # Finite is not enough: means of 1e300 make the merged statistics overflow, and the guard would
    # then undo every round's aggregation (one node stalls the run). No environment fedrl runs
    # observes anything near these bounds; a node that claims to is left out.
    if float(np.max(np.abs(m.mean))) > MAX_OBS_MEAN:
        return f"observation means beyond +-{MAX_OBS_MEAN:g}"
    if float(np.max(m.m2)) > MAX_OBS_MEAN**2 * float(steps):
        return f"observation variance beyond {MAX_OBS_MEAN**2:g}"
    if not centred and bool(np.any(m.mean != 0)):  # merged, a mean would shift what every node sees
        return "observation means must be 0: statistics are kept about zero (algo.norm-obs-center = false)"
    return None


def weights_problem(reference: list[np.ndarray], weights: list[np.ndarray]) -> str | None:
    """Why ``weights`` cannot stand in for ``reference``: not float32 arrays (before any arithmetic:
    ``np.isfinite`` raises on strings, datetimes pass it), or count, shape, non-finite values."""
    for i, w in enumerate(weights):
        if not isinstance(w, np.ndarray) or w.dtype != np.float32:
            got = w.dtype if isinstance(w, np.ndarray) else type(w).__name__
            return f"array {i}: dtype {got}, expected float32"
    return check_weights(reference, weights)


def update_norm(delta: list[np.ndarray]) -> float:
    """L2 norm of an update, in float64 (a float32 sum of squares of 3.4e38 would be inf)."""
    return float(np.linalg.norm(flatten(delta).astype(np.float64)))


def norm_problem(delta: list[np.ndarray], bound: float) -> str | None:
    """Why an update is too long for ``strategy.max-update-norm = bound`` (0: no bound)."""
    if bound <= 0:
        return None
    norm = update_norm(delta)
    return None if norm <= bound else f"update norm {norm:.4g} exceeds strategy.max-update-norm = {bound:g}"


def reply_problem(fed: Federation, reply: Reply, expected_node: int) -> str | None:
    """Why a decoded reply must be left out of round's aggregate (None: usable). See ``checked``."""
    result = checked(fed, reply, expected_node)
    return result if isinstance(result, str) else None


def checked(fed: Federation, reply: Reply, expected_node: int) -> Reply | str:
    """The reply, its compressed update decoded once into ``Reply.decoded``, if it may enter the
    round's aggregate; else why not. See the module doc.

    The update norm is measured against the weights the node was sent this round (for gossip:
    its model at the start of the round; for a stale asynchronous reply: the current model).
    """
    if reply.node != expected_node:
        return f"answered for node {reply.node}, asked for {expected_node}"
    why = steps_problem(reply.env_steps, fed.cfg.algo.local_steps)
    if why is not None:
        return why
    if fed.up.active:
        if reply.update is None or reply.update.name != fed.up.name:
            got = "weights" if reply.update is None else reply.update.name
            return f"sent {got}, expected a {fed.up.name} update (compression.up)"
        try:
            delta = fed.delta(reply)
            flat = flatten(delta)
        except ValueError as err:
            return f"bad {fed.up.name} payload: {err}"
        if not bool(np.all(np.isfinite(flat))):
            return f"bad {fed.up.name} payload: non-finite values"
        reply = replace(reply, decoded=delta)
    else:
        why = weights_problem(fed.models[fed.slot(reply.node)], reply.weights)
        if why is not None:
            return why
        delta = fed.delta(reply)
    why = moments_problem(reply.obs_moments, fed.obs_travel, fed.spec.obs_dim,
                          int(reply.env_steps), fed.cfg.algo.norm_obs_center)
    if why is None:
        why = norm_problem(delta, fed.cfg.strategy.max_update_norm)
    return reply if why is None else why


def nonfinite_slots(models: list[list[np.ndarray]], moments: list[Moments | None]) -> list[int]:
    """Model slots whose weights or observation statistics hold a NaN or inf."""
    bad = []
    for s, (model, m) in enumerate(zip(models, moments, strict=True)):
        finite = all(bool(np.all(np.isfinite(w))) for w in model)
        if m is not None:
            finite = finite and bool(np.isfinite(m.count) and np.all(np.isfinite(m.mean)) and np.all(np.isfinite(m.m2)))
        if not finite:
            bad.append(s)
    return bad


def undo_if_nonfinite(rule: ServerRule, label: str, apply: Callable[[], None]) -> str | None:
    """Run one aggregation step of ``rule``; if it leaves a model slot or its observation
    statistics non-finite, give back what was there before (bit for bit) and say why, else None.

    One guard for every rule: whatever overflowed (a finite but huge update, a server
    optimizer's division, DP noise), the run goes on with the previous model.
    """
    saved = rule.save()
    apply()
    bad = nonfinite_slots(rule.models, rule.moments)
    if not bad:
        return None
    rule.restore(saved, bad)
    what = "global model" if len(rule.models) == 1 else f"model of {'node' if rule.per_node else 'edge'}s {bad}"
    return f"{label} gave a non-finite {what} (or observation statistics); kept the previous one"
