"""An Adam optimizer's moments as ``NodeState`` arrays, so a node's optimizer continues across
rounds (and SuperNode restarts) instead of restarting its bias correction every round.

Keys: ``adam.<i>.m``, ``adam.<i>.v`` and ``adam.<i>.step`` for the ``i``-th parameter of the
first parameter group. A saved moment whose shape does not fit the parameter is ignored (a fresh
start), never an error: the state may come from another model after a config change.
"""

from __future__ import annotations

import numpy as np
import torch


def adam_to_arrays(opt: torch.optim.Adam) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for i, p in enumerate(opt.param_groups[0]["params"]):
        st = opt.state.get(p)
        if st:
            out[f"adam.{i}.m"] = st["exp_avg"].numpy().copy()
            out[f"adam.{i}.v"] = st["exp_avg_sq"].numpy().copy()
            out[f"adam.{i}.step"] = np.asarray([float(st["step"])])
    return out


def adam_from_arrays(opt: torch.optim.Adam, arrays: dict[str, np.ndarray]) -> None:
    for i, p in enumerate(opt.param_groups[0]["params"]):
        m, v = arrays.get(f"adam.{i}.m"), arrays.get(f"adam.{i}.v")
        if m is None or v is None or m.shape != tuple(p.shape):
            continue  # no saved moments (first round) or a different model: start fresh
        opt.state[p] = {
            "step": torch.tensor(float(arrays[f"adam.{i}.step"][0])),
            "exp_avg": torch.as_tensor(m).clone(),
            "exp_avg_sq": torch.as_tensor(v).clone(),
        }
