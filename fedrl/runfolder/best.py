"""The best model so far, kept as Stable-Baselines3's ``EvalCallback`` keeps it.

A federation that solves and then forgets is not solved (issue 13): the last model of a run may be
a collapsed one. So every evaluation (each ``eval.every`` round, the last round, and the final
evaluation ``rundir.finish`` makes when the last round did not evaluate) is compared with the best
so far, and when it is better the run writes ``best_model.npz`` (the format of ``model.npz``).

"Better" is by the worst variant's return, ties broken by the mean (``score``); only a strictly
better evaluation replaces the best, so among equal ones the earliest round is kept, as in
Stable-Baselines3. An evaluation with a non-finite return never counts.

Per-node runs (``strategy.name = local``, gossip) evaluate node i's own model on variant i; the
rule is the same on those returns: the best is one **round**, the one whose worst node did best,
and ``best_model.npz`` holds every node's model of that round (``node{i}/...``), as ``model.npz``
does at the end. One round rather than each node's own best: the file is then one consistent
state of the federation (gossip nodes' models depend on each other), and ``best_round`` means one
thing in every mode.

The best so far (round and returns) is kept in the checkpoint (``to_meta``/``from_meta``), so a
resumed run does not let a worse evaluation overwrite ``best_model.npz``. If a run is killed after
``best_model.npz`` is written and before that round's checkpoint, the resumed run redoes the round;
when the redone evaluation beats the checkpointed best again (as it does when the round is redone
identically) the file is rewritten and agrees with the checkpoint. When it does not (a redo that
trained differently), ``best_model.npz`` keeps the killed process's model of that round while
``best_round`` names the checkpointed best, until a later evaluation beats that.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fedrl.errors import RunFileError

LAST_EVALS = 5  # how many of the last evaluations last_evals_min_return looks at (issue 13)


def score(returns: Sequence[float]) -> tuple[float, float]:
    """(worst variant's return, mean return): the order evaluations are ranked in."""
    return min(returns), sum(returns) / len(returns)


@dataclass(frozen=True)
class Best:
    """The best evaluation so far: the round it was made after and its worst and mean returns."""

    round: int
    min_return: float
    mean_return: float

    @classmethod
    def of(cls, rnd: int, returns: Sequence[float]) -> Best:
        lo, mean = score(returns)
        return cls(rnd, lo, mean)

    def to_meta(self) -> dict[str, Any]:
        """JSON for the checkpoint's metadata."""
        return {"round": self.round, "min_return": self.min_return, "mean_return": self.mean_return}

    @classmethod
    def from_meta(cls, meta: object, src: object, last_round: int) -> Best | None:
        """The ``best`` entry of a checkpoint's metadata (None: no evaluation was better yet).

        Raises:
            RunFileError: naming ``src`` and ``best`` unless it is an object with an integer
                ``round`` in ``[0, last_round]`` and finite ``min_return`` <= ``mean_return``.
        """
        if meta is None:
            return None
        ok = isinstance(meta, dict) and set(meta) == {"round", "min_return", "mean_return"}
        if ok:
            assert isinstance(meta, dict)
            rnd, lo, mean = meta["round"], meta["min_return"], meta["mean_return"]
            ok = (type(rnd) is int and 0 <= rnd <= last_round
                  and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (lo, mean))
                  and lo <= mean)
        if not ok:
            raise RunFileError(src, "best", f"is {meta!r:.120}; an object with an integer round in [0, {last_round}] "
                                            "and finite min_return <= mean_return")
        assert isinstance(meta, dict)
        return cls(meta["round"], float(meta["min_return"]), float(meta["mean_return"]))


def improves(returns: Sequence[float], best: Best | None) -> bool:
    """True when an evaluation with these per-variant ``returns`` is strictly better than ``best``
    (by ``score``); never for an empty or non-finite one."""
    if not returns or not all(isinstance(r, (int, float)) and math.isfinite(r) for r in returns):
        return False
    return best is None or score(returns) > (best.min_return, best.mean_return)


def last_evals_min(evals: Sequence[Sequence[float | None]], k: int = LAST_EVALS) -> float | None:
    """The worst variant's return over the last ``k`` evaluations (each a list of per-variant
    returns, oldest first); a non-finite or missing return counts as the worst there is
    (``-inf``, written as null in JSON). None when there was no evaluation."""
    tail = [r for ev in evals[-k:] for r in ev]
    if not tail:
        return None
    return min(r if isinstance(r, (int, float)) and math.isfinite(r) else -math.inf for r in tail)


def table_line(summary: dict[str, Any]) -> str:
    """The console's word on the final model against the best (``rundir.print_table``)."""
    rnd = summary.get("best_round")
    if rnd is None:
        return "no best model: no evaluation had finite returns; fedrl export --which final exports model.npz"
    if rnd == summary["rounds_completed"]:
        return f"final model = best (round {rnd})"
    return (f"best model: round {rnd}, min {summary['best_eval_min_return']:.1f} / mean "
            f"{summary['best_eval_mean_return']:.1f} (final: min {summary['eval_min_return']:.1f}); "
            "fedrl export uses best by default")
