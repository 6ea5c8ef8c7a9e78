"""Arithmetic in the ring Z_(2^bits), 1 <= bits <= 32, on vectors held as ``np.uint64``.

Inputs to the ring helpers must already be reduced (each value in ``[0, 2**bits)``); outputs are.
Because ``2**bits`` divides ``2**64``, wrap-around ``uint64`` arithmetic followed by one final
reduction is exact, which lets callers accumulate many terms in place.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

MAX_BITS = 32

RingVector = npt.NDArray[np.uint64]


def check_bits(bits: int) -> int:
    """Return ``bits`` as an int if it is an int in ``[1, 32]``; raise ``ValueError`` otherwise."""
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 1 <= int(bits) <= MAX_BITS:
        raise ValueError(f"bits must be an int in [1, {MAX_BITS}], got {bits!r}")
    return int(bits)


def ring_mask(bits: int) -> np.uint64:
    """``2**bits - 1`` as ``np.uint64``: ``v & ring_mask(bits)`` reduces ``v`` into the ring."""
    return np.uint64((1 << check_bits(bits)) - 1)


def ring_reduce(v: RingVector, bits: int) -> RingVector:
    """Reduce a ``uint64`` vector (possibly wrapped mod 2**64) into ``[0, 2**bits)``, in place."""
    v &= ring_mask(bits)
    return v


def ring_add(a: RingVector, b: RingVector, bits: int) -> RingVector:
    """``(a + b) mod 2**bits`` as a new ``uint64`` vector."""
    return ring_reduce(np.add(a, b, dtype=np.uint64), bits)


def ring_sub(a: RingVector, b: RingVector, bits: int) -> RingVector:
    """``(a - b) mod 2**bits`` as a new ``uint64`` vector."""
    return ring_reduce(np.subtract(a, b, dtype=np.uint64), bits)


def ring_sum(vectors: Iterable[RingVector], bits: int, length: int | None = None) -> RingVector:
    """Sum of equal-length vectors mod ``2**bits``.

    ``length`` gives the result's length for an empty iterable (zeros); without it an empty iterable
    raises ``ValueError``.
    """
    mask = ring_mask(bits)
    total: RingVector | None = None if length is None else np.zeros(length, dtype=np.uint64)
    for v in vectors:
        total = np.array(v, dtype=np.uint64) if total is None else np.add(total, v, out=total, dtype=np.uint64)
    if total is None:
        raise ValueError("ring_sum of no vectors needs a length")
    total &= mask
    return total


def to_ring_vector(x: npt.ArrayLike, bits: int, length: int, name: str = "x") -> RingVector:
    """Validate ``x`` as ``length`` integers in ``[0, 2**bits)`` and return a ``uint64`` copy.

    Raises:
        ValueError: naming ``name``, on a wrong shape, a non-integer dtype or an out-of-range value.
    """
    bits = check_bits(bits)
    a = np.asarray(x)
    if a.shape != (length,):
        raise ValueError(f"{name} must have shape ({length},), got {a.shape}")
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must have an integer dtype, got {a.dtype}")
    if a.size and (int(a.min()) < 0 or int(a.max()) >= 1 << bits):
        raise ValueError(f"{name} values must lie in [0, 2**{bits}), got [{int(a.min())}, {int(a.max())}]")
    return a.astype(np.uint64, copy=True)


def required_bits(max_value_per_node: int, n_nodes: int) -> int:
    """Smallest ``bits`` with ``n_nodes * max_value_per_node < 2**bits``: an n-node sum never wraps.

    Raises:
        ValueError: on a negative value, ``n_nodes < 1`` or a result above 32 bits.
    """
    for name, v, lo in (("max_value_per_node", max_value_per_node, 0), ("n_nodes", n_nodes, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < lo:
            raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    bits = max(1, (int(n_nodes) * int(max_value_per_node)).bit_length())
    if bits > MAX_BITS:
        raise ValueError(f"a sum of {n_nodes} values up to {max_value_per_node} needs {bits} bits > {MAX_BITS}")
    return bits
