"""``powersgd``: low-rank compression of each weight matrix (Vogels, Karimireddy and Jaggi, NeurIPS 2019).

The update is the model's tensors flattened in ``get_weights`` order, so this compressor is built
with their shapes. Each tensor of two or more dimensions is viewed as a matrix ``M`` (``m`` rows,
the product of the other dimensions as columns) and, where ``r * (m + n) < m * n`` with
``r = min(rank, m, n)``, sent as two factors from one step of subspace iteration:

    P = orthonormalize(M @ Q0)     (m x r, QR)
    Q = M.T @ P                    (n x r)
    decode: P @ Q.T                (= P P^T M, the projection of M onto span(P))

``Q0`` is the node's ``Q`` of its previous round (warm start: repeated rounds refine the same
subspace, the paper's main trick) or, on a node's first round, a Gaussian draw from ``rng``.
Vectors (biases) and matrices too small to gain are sent as they are.

Error: a matrix of rank <= r is reproduced exactly (up to float rounding) whenever ``M @ Q0``
spans its column space (with probability one for a Gaussian ``Q0``); otherwise ``P P^T M`` is
the best approximation of ``M`` within ``span(P)``. Biased, so the uplink stage keeps error
feedback (the paper's, on the node). Not summable: the sum of nodes' ``P_i Q_i^T`` is not a
product of summed factors, so secure aggregation refuses it (``fedrl.features.secure``); the
paper's all-reduce of ``P`` then ``Q`` needs every worker in two extra exchanges per step.

With ``bits > 0`` the factors and the raw tensors are each quantized (``Quantize``, stochastic
rounding, one scale per ``QUANT_CHUNK`` values) instead of sent as float32.

Payload: ``p`` and ``q`` (all factors, concatenated) and ``rest`` (the raw tensors), float32; or
with ``bits > 0`` each as ``<part>.scale`` and ``<part>.codes`` (see ``Quantize``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedrl.compression.base import Compressed, Compressor, _as_update, _check_int
from fedrl.compression.quantizers import Quantize

QUANT_CHUNK = 256  # values per quantization scale: 4 bytes of scale per 256 codes


@dataclass(frozen=True)
class _Tensor:
    """Where one tensor sits in the flat update and how it travels (``rank == 0``: raw)."""

    offset: int
    rows: int
    cols: int
    rank: int

    @property
    def size(self) -> int:
        return self.rows * self.cols


def _layout(shapes: Sequence[tuple[int, ...]], rank: int) -> list[_Tensor]:
    out, at = [], 0
    for shape in shapes:
        if any(int(d) < 0 for d in shape):
            raise ValueError(f"tensor shapes must be non-negative, got {tuple(shape)}")
        rows = int(shape[0]) if len(shape) >= 2 else 1
        cols = math.prod(int(d) for d in shape[1:]) if len(shape) >= 2 else math.prod(int(d) for d in shape)
        r = min(rank, rows, cols) if len(shape) >= 2 else 0
        if r and r * (rows + cols) >= rows * cols:
            r = 0
        out.append(_Tensor(at, rows, cols, r))
        at += rows * cols
    return out


class PowerSGD(Compressor):
    """Rank-``rank`` factors per weight matrix, warm-started (see the module doc)."""

    name = "powersgd"
    unmaskable = ("each node sends its own low-rank factors, and a sum of factors is not the factors of a sum (not summable)")
    summable = False
    unbiased = False

    def __init__(self, shapes: Sequence[tuple[int, ...]], rank: int = 2, bits: int = 0) -> None:
        self.rank = _check_int("rank", rank, 1)
        self.bits = _check_int("bits", bits, 0, 16)
        self.shapes = tuple(tuple(int(d) for d in s) for s in shapes)
        self.tensors = _layout(self.shapes, self.rank)
        self.n = sum(t.size for t in self.tensors)
        self.factored = [t for t in self.tensors if t.rank]
        self.raw = [t for t in self.tensors if not t.rank]
        self.p_len = sum(t.rows * t.rank for t in self.factored)
        self.q_len = sum(t.cols * t.rank for t in self.factored)
        self.rest_len = sum(t.size for t in self.raw)
        self._quant = Quantize(bits=bits, chunk=QUANT_CHUNK) if bits else None

    def __repr__(self) -> str:
        return f"PowerSGD(rank={self.rank}, bits={self.bits}, tensors={len(self.shapes)})"

    @property
    def floats_sent(self) -> int:
        """Values per update on the wire (factors and raw tensors), against ``n`` uncompressed."""
        return self.p_len + self.q_len + self.rest_len

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> Compressed:
        """One subspace step from a Gaussian start (no warm start); see :meth:`encode_warm`."""
        return self.encode_warm(x, rng, None)[0]

    def encode_warm(self, x: np.ndarray, rng: np.random.Generator,
                    warm: np.ndarray | None) -> tuple[Compressed, np.ndarray]:
        """Compress ``x`` starting from ``warm`` (the ``Q`` factors this returned last time, 1-D);
        return the payload and the ``Q`` factors to start from next time.

        A ``warm`` of another length (another model or rank) is ignored and drawn afresh.

        Raises:
            ValueError: ``x`` not a finite 1-D array of the layout's length.
        """
        a = _as_update(x)
        if a.size != self.n:
            raise ValueError(f"update has {a.size} values, the model's tensors hold {self.n}")
        use_warm = warm is not None and np.shape(warm) == (self.q_len,) and bool(np.all(np.isfinite(warm)))
        ps, qs = [], []
        for t, q_at in zip(self.factored, np.cumsum([0] + [t.cols * t.rank for t in self.factored]), strict=False):
            m = a[t.offset:t.offset + t.size].astype(np.float64).reshape(t.rows, t.cols)
            if use_warm:
                assert warm is not None
                q0 = np.asarray(warm[q_at:q_at + t.cols * t.rank], np.float64).reshape(t.cols, t.rank)
            else:
                q0 = rng.standard_normal((t.cols, t.rank))
            p, _ = np.linalg.qr(m @ q0)
            ps.append(p.ravel())
            qs.append((m.T @ p).ravel())
        p_all = (np.concatenate(ps) if ps else np.zeros(0)).astype(np.float32)
        q_all = (np.concatenate(qs) if qs else np.zeros(0)).astype(np.float32)
        rest = np.concatenate([a[t.offset:t.offset + t.size] for t in self.raw]) if self.raw else np.zeros(0, np.float32)
        arrays: dict[str, np.ndarray] = {}
        for part, values in (("p", p_all), ("q", q_all), ("rest", rest)):
            if self._quant is None:
                arrays[part] = values.astype(np.float32)
            else:
                c = self._quant.encode(values, rng)
                arrays.update({f"{part}.{k}": v for k, v in c.arrays.items()})
        return Compressed(self.name, arrays, self.n), q_all

    def _part(self, c: Compressed, part: str, length: int) -> np.ndarray:
        if self._quant is None:
            values = np.asarray(c.arrays[part])
            if values.shape != (length,) or values.dtype.kind != "f":
                raise ValueError(f"powersgd payload's {part!r} must hold {length} floats, got {values.dtype} "
                                 f"{values.shape}")
            return values.astype(np.float32)
        inner = Compressed("quantize", {"scale": c.arrays[f"{part}.scale"], "codes": c.arrays[f"{part}.codes"]},
                           length)
        return self._quant.decode(inner)

    def decode(self, c: Compressed) -> np.ndarray:
        parts = ("p", "q", "rest")
        keys = parts if self._quant is None else tuple(f"{p}.{k}" for p in parts for k in ("scale", "codes"))
        self._check_payload(c, keys)
        if int(c.n) != self.n:
            raise ValueError(f"powersgd payload decodes to {c.n} values, the model's tensors hold {self.n}")
        p_all = self._part(c, "p", self.p_len).astype(np.float64)
        q_all = self._part(c, "q", self.q_len).astype(np.float64)
        rest = self._part(c, "rest", self.rest_len)
        out = np.empty(self.n, np.float32)
        p_at = q_at = r_at = 0
        for t in self.tensors:
            if t.rank:
                p = p_all[p_at:p_at + t.rows * t.rank].reshape(t.rows, t.rank)
                q = q_all[q_at:q_at + t.cols * t.rank].reshape(t.cols, t.rank)
                out[t.offset:t.offset + t.size] = (p @ q.T).ravel()
                p_at, q_at = p_at + p.size, q_at + q.size
            else:
                out[t.offset:t.offset + t.size] = rest[r_at:r_at + t.size]
                r_at += t.size
        return out
