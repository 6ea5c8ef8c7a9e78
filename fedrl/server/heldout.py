"""The held-out fields of metrics rows and summary.json (``eval.held-out``).

Jin et al. (AISTATS 2022, "Federated reinforcement learning with environment heterogeneity")
report how the federated policy does on environments none of the agents saw. With
``eval.held-out = N > 0`` every evaluation also runs the model the run exports on N variants drawn
from ``env.vary`` that no node trains on (``fedrl.envs.spec.sample_heldout``), ``eval.episodes``
episodes each: N x eval.episodes more episodes per evaluation. With N = 0 nothing here adds a
field: rows, summary.json and config.json are exactly what they were without the key.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def row_fields(returns: list[float]) -> dict[str, Any]:
    """A metrics row's fields for one evaluation's held-out returns (one per held-out variant):
    ``heldout_returns``, ``heldout_mean_return``, ``heldout_min_return``; ``{}`` for no returns."""
    if not returns:
        return {}
    # A return read back from metrics.jsonl may be null (a non-finite one is written so): it makes
    # the mean and the minimum NaN (written as null again) instead of failing the summary.
    vals = [float(r) if isinstance(r, (int, float)) and not isinstance(r, bool) else math.nan for r in returns]
    worst = math.nan if any(math.isnan(v) for v in vals) else min(vals)
    return {"heldout_returns": list(returns), "heldout_mean_return": math.fsum(vals) / len(vals),
            "heldout_min_return": worst}


def summary_fields(variants: list[dict[str, float]], rows: list[dict[str, Any]], last_round: int,
                   evaluate: Callable[[], list[float]]) -> dict[str, Any]:
    """summary.json's ``heldout`` (one ``{index, params, mean_return}`` per held-out variant),
    ``heldout_mean_return`` and ``heldout_min_return`` of the final model: from the metrics row of
    round ``last_round`` when it evaluated them all, else from ``evaluate()`` (the federation's
    ``evaluate_heldout``); ``{}`` when there are no held-out variants."""
    if not variants:
        return {}
    done = [r for r in rows if r.get("round") == last_round and r.get("heldout_returns")]
    returns = done[-1]["heldout_returns"] if done and len(done[-1]["heldout_returns"]) == len(variants) \
        else evaluate()
    return {
        "heldout": [{"index": j, "params": v, "mean_return": r}
                    for j, (v, r) in enumerate(zip(variants, returns, strict=True))],
        **{k: v for k, v in row_fields(returns).items() if k != "heldout_returns"},
    }
