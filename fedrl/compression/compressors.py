"""The compressor registry: config names -> compressor objects.

A plain dict, as the rule and algorithm registries: ``register`` adds a compressor from any module
(a test file, a user's package imported before the run starts), and ``compression.up`` /
``compression.down`` accept its name from then on. Each entry keeps the compressor's class, so the
run's checks read what it declares (``summable``, ``unmaskable``) without building it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fedrl.compression.base import Compressed, Compressor
from fedrl.compression.floats import BF16, FP16, NoCompression
from fedrl.compression.low_rank import PowerSGD
from fedrl.compression.quantizers import QSGD, Quantize, SignCompressor
from fedrl.compression.sparsifiers import RandK, TopK

__all__ = ["BF16", "COMPRESSORS", "FP16", "KINDS", "QSGD", "SHAPED", "Compressed", "Compressor", "NoCompression", "PowerSGD",
           "Quantize", "RandK", "SignCompressor", "TopK", "make_compressor"]

_Factory = Callable[[int, float, int, int], Compressor]

COMPRESSORS: dict[str, _Factory] = {
    "none": lambda bits, fraction, levels, chunk: NoCompression(),
    "fp16": lambda bits, fraction, levels, chunk: FP16(),
    "bf16": lambda bits, fraction, levels, chunk: BF16(),
    "quantize": lambda bits, fraction, levels, chunk: Quantize(bits=bits, chunk=chunk),
    "qsgd": lambda bits, fraction, levels, chunk: QSGD(levels=levels),
    "topk": lambda bits, fraction, levels, chunk: TopK(fraction=fraction),
    "randk": lambda bits, fraction, levels, chunk: RandK(fraction=fraction),
    "sign": lambda bits, fraction, levels, chunk: SignCompressor(),
}
"""Registry: name -> factory(bits, fraction, levels, chunk). Knobs a compressor does not use are ignored."""

KINDS: dict[str, type[Compressor]] = {
    "none": NoCompression, "fp16": FP16, "bf16": BF16, "quantize": Quantize, "qsgd": QSGD, "topk": TopK,
    "randk": RandK, "sign": SignCompressor, "powersgd": PowerSGD}
"""Every compressor's class (its declarations), by name; the shaped ones too."""
_BUILTIN = frozenset(KINDS)

SHAPED = ("powersgd",)
"""Compressors that need the model's tensor shapes (``make_compressor(..., shapes=)``), kept out of
``COMPRESSORS`` whose members compress any 1-D vector."""


def register(name: str, kind: type[Compressor], factory: _Factory | None = None) -> None:
    """Make ``compression.up = name`` (and ``compression.down``) use ``kind``, built by ``factory``
    (default: ``kind()``). Re-registering a name replaces it; a built-in name cannot be replaced."""
    if not name or not name.replace("-", "").isalnum():
        raise ValueError(f"a compressor name is letters, digits and '-', got {name!r}")
    if name in _BUILTIN:
        raise ValueError(f"the built-in compressor {name} cannot be replaced")
    KINDS[name] = kind
    COMPRESSORS[name] = factory if factory is not None else (lambda bits, fraction, levels, chunk: kind())


def unregister(name: str) -> None:
    if name in _BUILTIN:
        raise ValueError(f"the built-in compressor {name} cannot be unregistered")
    KINDS.pop(name, None)
    COMPRESSORS.pop(name, None)


def check_up(value: object) -> str | None:
    """A config check (``fedrl.config.checks``) for ``compression.up``: any registered compressor."""
    return None if value in KINDS else f"allowed: {', '.join(KINDS)}"


def check_down(value: object) -> str | None:
    """A config check for ``compression.down``: a registered compressor of any 1-D vector."""
    return None if value in COMPRESSORS else f"allowed: {', '.join(COMPRESSORS)}"


def make_compressor(
    name: str, *, bits: int = 8, fraction: float = 0.01, levels: int = 16, chunk: int = 0, rank: int = 2,
    factor_bits: int = 0, shapes: Sequence[tuple[int, ...]] | None = None,
) -> Compressor:
    """Build a compressor by registry name; ``powersgd`` also takes ``rank``, ``factor_bits``
    (0: float32 factors) and the model's tensor ``shapes``.

    Raises:
        ValueError: naming the allowed names for an unknown ``name``, or naming the bad knob and
            its allowed range (``bits`` in [1, 16], ``fraction`` in (0, 1], ``levels`` in
            [1, 65535], ``chunk`` >= 0, ``rank`` >= 1, ``factor_bits`` in [0, 16]); ``powersgd``
            without ``shapes``.
    """
    if name == "powersgd":
        if shapes is None:
            raise ValueError("powersgd compresses each weight matrix, so it needs the model's tensor shapes")
        return PowerSGD(shapes, rank=rank, bits=factor_bits)
    if name not in COMPRESSORS:
        raise ValueError(f"unknown compressor {name!r}; allowed: {', '.join(sorted([*COMPRESSORS, *SHAPED]))}")
    return COMPRESSORS[name](bits, fraction, levels, chunk)
