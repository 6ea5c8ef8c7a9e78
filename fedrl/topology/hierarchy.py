"""Hierarchical federated averaging (HierFAVG, Liu et al., ICC 2020): nodes, edges, a cloud.

Each round every edge averages the updates of its own nodes into its edge model (FedAvg with
``strategy.server-lr``); every ``topology.cloud-every`` rounds the cloud averages the edge
models, weighted by their numbers of nodes, and sends the result back to every edge. Flower
routes messages only between the ServerApp and the nodes, so the ServerApp plays every edge and
the cloud: what an edge would send the cloud is counted as edge-tier traffic (float32 models).

Node-to-edge assignment (``topology.assign``):

- ``contiguous``: node i of n goes to edge floor(i E / n);
- ``cluster``: k-means (Lloyd, from a seeded start) on the nodes' variant parameters, each
  scaled to [0, 1], so similar environments share an edge; any empty cluster gets the node
  farthest from its centre;
- an explicit list ``"0,0,1,1,..."`` with one edge index per node.

Each tier has its own rule: ``topology.edge-rule`` for an edge over its nodes' updates (applied
in ``Federation``), ``topology.cloud-rule`` for the cloud over the edge models (``cloud_model``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedrl.aggregation.robust import robust_aggregate
from fedrl.errors import ConfigError
from fedrl.seeding import numpy_rng

TOPOLOGY = 10  # seeding purpose of the cluster start


def assign_edges(how: str, variants: Sequence[dict[str, float]], edges: int, seed: int) -> list[int]:
    """The edge of each node.

    Raises:
        ConfigError: naming ``topology.assign`` or ``topology.edges`` on a bad mapping or count.
    """
    n = len(variants)
    if not 1 <= edges <= n:
        raise ConfigError("topology.edges", f"got {edges}; must be between 1 and nodes.count = {n}")
    if how == "contiguous":
        return [i * edges // n for i in range(n)]
    if how == "cluster":
        return _cluster(variants, edges, seed)
    try:
        mapping = [int(s) for s in how.split(",")]
    except ValueError:
        raise ConfigError("topology.assign", f"got {how!r}; use contiguous, cluster or one edge index per node, "
                                             "e.g. '0,0,1,1'")
    if len(mapping) != n or sorted(set(mapping)) != list(range(edges)):
        raise ConfigError("topology.assign", f"got {how!r}; needs {n} entries (one per node) using every edge "
                                             f"0..{edges - 1} (topology.edges = {edges})")
    return mapping


def _cluster(variants: Sequence[dict[str, float]], k: int, seed: int) -> list[int]:
    keys = sorted({key for v in variants for key in v})
    x = np.array([[v.get(key, 0.0) for key in keys] for v in variants], np.float64).reshape(len(variants), -1)
    span = x.max(axis=0) - x.min(axis=0) if x.size else np.zeros(0)
    x = (x - x.min(axis=0)) / np.where(span > 0, span, 1.0) if x.size else np.zeros((len(variants), 1))
    centres = x[numpy_rng(seed, TOPOLOGY).choice(len(x), k, replace=False)]
    labels = np.zeros(len(x), int)
    for _ in range(100):
        d = ((x[:, None, :] - centres[None, :, :]) ** 2).sum(-1)
        labels = d.argmin(axis=1)
        for c in range(k):  # an empty cluster takes the node farthest from its own centre
            if not np.any(labels == c):
                far = int(d[np.arange(len(x)), labels].argmax())
                labels[far] = c
        new = np.array([x[labels == c].mean(axis=0) for c in range(k)])
        if np.allclose(new, centres):
            break
        centres = new
    return [int(v) for v in labels]


def cloud_average(models: Sequence[Sequence[np.ndarray]], weights: Sequence[float]) -> list[np.ndarray]:
    """The weighted average of edge models (float64 accumulation); one edge returns itself exactly."""
    total = float(sum(weights))
    if total <= 0 or len(models) != len(weights):
        raise ValueError("one positive weight per edge model")
    out = [np.zeros(a.shape, np.float64) for a in models[0]]
    for m, w in zip(models, weights, strict=True):
        for acc, a in zip(out, m, strict=True):
            acc += (w / total) * a.astype(np.float64)
    return [a.astype(np.float32) for a in out]


def cloud_model(models: Sequence[Sequence[np.ndarray]], counts: Sequence[int], rule: str, trim: float
                ) -> list[np.ndarray]:
    """The cloud's combination of the edge models (``topology.cloud-rule``): ``fedavg`` weighted
    by the edges' node ``counts``, or the coordinate-wise ``median`` / ``trimmed-mean`` (unweighted)."""
    if rule == "fedavg":
        return cloud_average(models, counts)
    x = np.stack([np.concatenate([np.ravel(a) for a in m]) for m in models])
    flat = robust_aggregate(rule, x, 0, trim, 0)
    out, i = [], 0
    for a in models[0]:
        out.append(flat[i:i + a.size].reshape(a.shape).astype(np.float32))
        i += a.size
    return out
