"""Round parameters: threshold rule, validation and the plain-array form."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedrl.secagg.params import Params, make_params

SESSION = bytes(range(16))


def params(**kw: object) -> Params:
    args: dict[str, object] = {
        "round": 3,
        "session": SESSION,
        "nodes": range(10),
        "k_neighbours": 4,
        "threshold_fraction": 0.6,
        "bits": 16,
        "length": 8,
        "graph_seed": 0,
    }
    args.update(kw)
    return make_params(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("n", "k", "fraction", "threshold"),
    [
        (10, 4, 0.6, 3),
        (10, 4, 0.5, 3),
        (10, 4, 1.0, 5),
        (10, 4, 0.01, 1),
        (10, 0, 0.5, 5),
        (10, 0, 0.51, 6),
        (10, 6, 0.5, 4),
        (10, 20, 0.7, 7),
        (1, 0, 0.5, 1),
    ],
)
def test_threshold_rule(n: int, k: int, fraction: float, threshold: int) -> None:
    p = params(nodes=range(n), k_neighbours=k, threshold_fraction=fraction)
    assert p.threshold == threshold


def test_fields_and_holders() -> None:
    p = params(nodes=[9, 2, 5, 7, 11, 4])
    assert p.nodes == (2, 4, 5, 7, 9, 11)
    assert p.round == 3 and p.session == SESSION and p.bits == 16 and p.length == 8
    for u in p.nodes:
        assert p.holders(u) == tuple(sorted((*p.neighbours[u], u)))
        assert len(p.holders(u)) == 5


def test_array_round_trip() -> None:
    p = params(nodes=[0, 5, 9, 12, 40, 41, 77])
    arrays = p.to_arrays()
    assert all(isinstance(a, np.ndarray) and a.dtype in (np.int64, np.uint8) for a in arrays.values())
    assert Params.from_arrays(arrays) == p


def test_from_arrays_rejects_malformed() -> None:
    arrays = params().to_arrays()
    for key in arrays:
        broken = dict(arrays)
        del broken[key]
        with pytest.raises(ValueError):
            Params.from_arrays(broken)
    broken = dict(arrays, neighbour_ptr=arrays["neighbour_ptr"][:-1])
    with pytest.raises(ValueError, match="neighbour_ptr"):
        Params.from_arrays(broken)
    broken = dict(arrays, neighbour_ids=arrays["neighbour_ids"][::-1].copy())
    with pytest.raises(ValueError, match="neighbours"):
        Params.from_arrays(broken)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"session": bytes(15)}, "session"),
        ({"bits": 0}, "bits"),
        ({"bits": 33}, "bits"),
        ({"length": 0}, "length"),
        ({"round": -1}, "round"),
        ({"k_neighbours": 3}, "k_neighbours"),
        ({"threshold_fraction": 0.0}, "threshold_fraction"),
        ({"threshold_fraction": 1.5}, "threshold_fraction"),
        ({"nodes": [1, 1, 2]}, "nodes"),
        ({"nodes": []}, "nodes"),
        ({"nodes": [-3, 1]}, "nodes"),
        ({"graph_seed": -1}, "graph_seed"),
    ],
)
def test_make_params_names_bad_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        params(**kw)


def test_params_validates_graph_and_threshold() -> None:
    p = params()
    with pytest.raises(ValueError, match="threshold"):
        dataclasses.replace(p, threshold=6)
    with pytest.raises(ValueError, match="threshold"):
        dataclasses.replace(p, threshold=0)
    asym = dict(p.neighbours)
    asym[0] = tuple(v for v in asym[0] if v != asym[0][0])
    with pytest.raises(ValueError, match="symmetric"):
        dataclasses.replace(p, neighbours=asym, threshold=1)
    loop = dict(p.neighbours)
    loop[0] = tuple(sorted((*loop[0], 0)))
    with pytest.raises(ValueError, match="neighbours"):
        dataclasses.replace(p, neighbours=loop)
    with pytest.raises(ValueError, match="nodes"):
        dataclasses.replace(p, nodes=tuple(reversed(p.nodes)))
