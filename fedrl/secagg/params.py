"""Public parameters of one SecAgg round, validated, and their plain-array form."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from fedrl.secagg.graph import neighbour_graph
from fedrl.secagg.ring import MAX_BITS

SESSION_BYTES = 16
MAX_ID = 2**63 - 1
"""Node ids and rounds must fit an int64 (they travel in int64 arrays and 8-byte fields)."""


def _int(name: str, value: object, lo: int, hi: int = MAX_ID) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= int(value) <= hi:
        raise ValueError(f"{name} must be an int in [{lo}, {hi}], got {value!r}")
    return int(value)


@dataclass(frozen=True)
class Params:
    """Everything every party must agree on for one round; all of it is public.

    ``neighbours`` is the symmetric, loop-free neighbour graph; the holders of node ``u``'s
    secrets are ``H(u) = neighbours[u] ∪ {u}``. ``threshold`` is the number of shares needed to
    reconstruct any secret, in ``[1, min_u |H(u)|]``. Construction validates every field and raises
    ``ValueError`` naming it.
    """

    round: int
    session: bytes
    nodes: tuple[int, ...]
    neighbours: dict[int, tuple[int, ...]]
    threshold: int
    bits: int
    length: int

    def __post_init__(self) -> None:
        _int("round", self.round, 0)
        if not isinstance(self.session, bytes) or len(self.session) != SESSION_BYTES:
            raise ValueError(f"session must be {SESSION_BYTES} bytes")
        if not isinstance(self.nodes, tuple) or not self.nodes:
            raise ValueError("nodes must be a non-empty tuple")
        for v in self.nodes:
            _int("nodes", v, 0)
        if list(self.nodes) != sorted(set(self.nodes)):
            raise ValueError("nodes must be sorted and distinct")
        if not isinstance(self.neighbours, dict) or set(self.neighbours) != set(self.nodes):
            raise ValueError("neighbours must be a dict keyed by exactly the nodes")
        members = set(self.nodes)
        for u, nb in self.neighbours.items():
            if not isinstance(nb, tuple) or list(nb) != sorted(set(nb)) or u in nb or not set(nb) <= members:
                raise ValueError(f"neighbours[{u}] must be a sorted tuple of other nodes without repeats")
            if any(u not in self.neighbours[v] for v in nb):
                raise ValueError(f"neighbours must be symmetric (node {u})")
        _int("threshold", self.threshold, 1, min(len(nb) + 1 for nb in self.neighbours.values()))
        _int("bits", self.bits, 1, MAX_BITS)
        _int("length", self.length, 1)

    def holders(self, u: int) -> tuple[int, ...]:
        """``H(u)``: the sorted nodes that may hold shares of ``u``'s secrets (``u`` included)."""
        return tuple(sorted((*self.neighbours[u], u)))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain int64/uint8 arrays that :meth:`from_arrays` turns back into an equal ``Params``."""
        nb = [self.neighbours[u] for u in self.nodes]
        return {
            "round": np.array([self.round], dtype=np.int64),
            "session": np.frombuffer(self.session, dtype=np.uint8).copy(),
            "nodes": np.array(self.nodes, dtype=np.int64),
            "neighbour_ptr": np.cumsum([0, *(len(x) for x in nb)], dtype=np.int64),
            "neighbour_ids": np.array([v for x in nb for v in x], dtype=np.int64),
            "scalars": np.array([self.threshold, self.bits, self.length], dtype=np.int64),
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> Params:
        """Inverse of :meth:`to_arrays`; raises ``ValueError`` on missing or malformed arrays."""
        try:
            nodes = tuple(int(v) for v in np.asarray(arrays["nodes"], dtype=np.int64))
            ptr = [int(p) for p in np.asarray(arrays["neighbour_ptr"], dtype=np.int64)]
            ids = [int(v) for v in np.asarray(arrays["neighbour_ids"], dtype=np.int64)]
            threshold, bits, length = (int(v) for v in np.asarray(arrays["scalars"], dtype=np.int64))
            session = np.asarray(arrays["session"], dtype=np.uint8).tobytes()
            (round_,) = (int(v) for v in np.asarray(arrays["round"], dtype=np.int64))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"malformed Params arrays: {err}") from err
        if (
            len(ptr) != len(nodes) + 1
            or ptr[0] != 0
            or ptr[-1] != len(ids)
            or any(a > b for a, b in itertools.pairwise(ptr))
        ):
            raise ValueError("malformed Params arrays: neighbour_ptr")
        neighbours = {u: tuple(ids[ptr[i] : ptr[i + 1]]) for i, u in enumerate(nodes)}
        return cls(round_, session, nodes, neighbours, threshold, bits, length)


def threshold_count(fraction: float, holders: int) -> int:
    """Shares needed to rebuild a secret held by ``holders`` nodes: ``max(1, ceil(fraction x holders))``.

    It is also the fewest nodes a sum can be unmasked from (the server aborts below it).
    """
    # The small epsilon keeps e.g. 0.6 * 5 = 3.0000000000000004 from rounding up to 4.
    return max(1, math.ceil(fraction * holders - 1e-9))


def make_params(
    round: int,
    session: bytes,
    nodes: Iterable[int],
    k_neighbours: int,
    threshold_fraction: float,
    bits: int,
    length: int,
    graph_seed: int,
) -> Params:
    """Params for a round over ``nodes`` with the :func:`neighbour_graph` ``(nodes, k_neighbours, graph_seed)``.

    ``threshold = max(1, ceil(threshold_fraction * min_u |H(u)|))``. Against a server that lies
    about who dropped, use ``threshold_fraction > 0.5``: each honest holder reveals only one kind
    of share per node, so two disjoint groups of ``threshold`` holders, one revealing ``b_v`` and
    one revealing ``s_sk_v``, cannot both exist (Bonawitz et al. 2017).

    Raises:
        ValueError: naming the offending field.
    """
    number = not isinstance(threshold_fraction, bool) and isinstance(threshold_fraction, (int, float))
    if not number or not 0.0 < float(threshold_fraction) <= 1.0:
        raise ValueError(f"threshold_fraction must be a number in (0, 1], got {threshold_fraction!r}")
    ids = list(nodes)
    for v in ids:
        _int("nodes", v, 0)
    if not ids or len(set(ids)) != len(ids):
        raise ValueError("nodes must be non-empty and distinct")
    _int("k_neighbours", k_neighbours, 0)
    _int("graph_seed", graph_seed, 0)
    try:
        graph = neighbour_graph(ids, k_neighbours, graph_seed)
    except ValueError as err:
        raise ValueError(f"k_neighbours: {err}") from err
    threshold = threshold_count(float(threshold_fraction), min(len(nb) + 1 for nb in graph.values()))
    return Params(int(round), session, tuple(sorted(int(v) for v in ids)), graph, threshold, bits, length)
