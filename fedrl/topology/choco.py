"""Compressed gossip with error compensation: CHOCO-Gossip (Koloskova, Stich and Jaggi, ICML 2019),
in gossip's local-update form (``fedrl.topology.gossip``).

Each node i keeps its model ``x_i`` and a *public copy* ``x̂_i`` that every party mixing with it
holds too (here the server, which relays, holds every node's). After training, node i sends only
``q_i = C(x_i - x̂_i)`` (``compression.up``), and node and server both add ``decode(q_i)`` to
``x̂_i`` (the same float32 arithmetic, so the copies agree bit for bit). The next round starts from

    x_i + γ * (sum_j W_ij x̂_j - x̂_i)          (W: Metropolis-Hastings, rows sum to 1)

What a compressor drops is not lost: it stays in ``x_i - x̂_i`` and is sent in later rounds (the
public copy is the error feedback, so classic error feedback is off under gossip). W is symmetric
and doubly stochastic, so the step leaves the nodes' average unchanged and the nodes reach
consensus on it; the paper proves a linear rate for any compressor with
``E||C(x) - x||^2 <= (1 - δ)||x||^2`` and ``γ`` small enough (its Theorem 2: ``γ`` of order
``ρ^2 δ``, ρ the spectral gap). With no compression ``x̂_i = x_i``, and with ``γ = 1`` the start
is ``sum_j W_ij x_j``: plain gossip (D-PSGD).

``γ`` is ``topology.consensus-step``. The server never sees ``x_i``, only ``x̂_i``: it evaluates
and reports consensus over the public copies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

PUBLIC_KEY = "gossip.public"  # node state: the node's public copy x̂_i, flat float32


def start(own: Sequence[np.ndarray], public: Sequence[np.ndarray], mixed_public: Sequence[np.ndarray],
          gamma: float) -> list[np.ndarray]:
    """Where a node trains from: ``own + gamma * (mixed_public - public)`` in float64, as float32
    (``mixed_public``: the gossip mix of the public copies, its own included)."""
    return [(np.asarray(x, np.float64) + gamma * (np.asarray(m, np.float64) - np.asarray(p, np.float64)))
            .astype(np.float32) for x, p, m in zip(own, public, mixed_public, strict=True)]


def advance(public: Sequence[np.ndarray], decoded: Sequence[np.ndarray]) -> list[np.ndarray]:
    """A public copy after a payload decoding to ``decoded``: the server's ``Update.trained``
    arithmetic (``fedrl.aggregation.fedavg.apply_delta`` with step 1, written out here because
    the node must not import the server's modules), so node and server hold the same float32 copy."""
    return [(np.asarray(p, np.float32) + np.asarray(d, np.float32)).astype(np.float32)
            for p, d in zip(public, decoded, strict=True)]


def consensus_round(x: np.ndarray, public: np.ndarray, w: np.ndarray,
                    compress: Callable[[np.ndarray, int], np.ndarray], gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """One CHOCO-Gossip step for average consensus on stacked vectors (row i: node i), no training:
    ``compress(v, i)`` is node i's decoded compression of ``v``. Returns the new ``x`` and public copies.

    Element-wise numpy only, no BLAS (``w @ public``): ``topology.consensus-step = auto`` runs this in
    the ServerApp's thread of Flower's simulation process, where an OpenBLAS call once spun for
    minutes in ``exec_blas`` and never returned."""
    q = np.stack([compress(x[i] - public[i], i) for i in range(x.shape[0])]).astype(np.float64)
    public = public + q
    mixed = np.zeros_like(public)
    for j in range(public.shape[0]):  # sum_j W_ij x̂_j, one column at a time
        mixed += w[:, j:j + 1] * public[j]
    return x + gamma * (mixed - public), public
