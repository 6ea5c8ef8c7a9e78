"""An Adam optimizer's moments as ``NodeState`` arrays, so a node's optimizer continues across
rounds (and SuperNode restarts) instead of restarting its bias correction every round.

Keys: ``adam.<i>.m``, ``adam.<i>.v`` and ``adam.<i>.step`` for the ``i``-th parameter of the
first parameter group (another ``prefix`` than ``adam`` for a second optimizer). A saved moment whose shape does not fit the parameter is ignored (a fresh
start), never an error: the state may come from another model after a config change.
"""

from __future__ import annotations

import numpy as np
import torch


def adam_to_arrays(opt: torch.optim.Adam, prefix: str = "adam") -> dict[str, np.ndarray]:
    """``opt``'s moments under ``<prefix>.<i>.*`` (a learner with several optimizers, as SAC,
    gives each its own prefix)."""
    out: dict[str, np.ndarray] = {}
    for i, p in enumerate(opt.param_groups[0]["params"]):
        st = opt.state.get(p)
        if st:
            out[f"{prefix}.{i}.m"] = st["exp_avg"].numpy().copy()
            out[f"{prefix}.{i}.v"] = st["exp_avg_sq"].numpy().copy()
            out[f"{prefix}.{i}.step"] = np.asarray([float(st["step"])])
    return out


def adam_from_arrays(opt: torch.optim.Adam, arrays: dict[str, np.ndarray], prefix: str = "adam") -> None:
    for i, p in enumerate(opt.param_groups[0]["params"]):
        m, v = arrays.get(f"{prefix}.{i}.m"), arrays.get(f"{prefix}.{i}.v")
        if m is None or v is None or m.shape != tuple(p.shape):
            continue  # no saved moments (first round) or a different model: start fresh
        opt.state[p] = {
            "step": torch.tensor(float(arrays[f"{prefix}.{i}.step"][0])),
            "exp_avg": torch.as_tensor(m).to(p.dtype, copy=True),
            "exp_avg_sq": torch.as_tensor(v).to(p.dtype, copy=True),
        }
