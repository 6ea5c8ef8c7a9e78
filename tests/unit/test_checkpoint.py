"""Unit tests for fedrl.storage.checkpoint: atomic, pickle-free save and load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedrl.storage.checkpoint import FILE, Checkpoint, load, save


def _ckpt(round_: int = 3) -> Checkpoint:
    return Checkpoint(
        meta={"round": round_, "env_steps": 12288, "name": "run-ü", "history": [1.5, 2.5], "nested": {"a": None}},
        arrays={
            "w/0": np.arange(6, dtype=np.float32).reshape(2, 3),
            "w/1": np.array([-1.5], np.float32),
            "obs_moments": np.array([3.0, 0.1, 0.2, 1.0, 2.0], np.float64),
            "counts": np.array([1, 2, 3], np.int64),
            "mask": np.array([True, False]),
            "scalar": np.array(7.0),
            "empty": np.zeros((0, 4), np.float32),
        },
    )


def test_round_trip(tmp_path: Path) -> None:
    ck = _ckpt()
    path = save(tmp_path, ck)
    assert path == tmp_path / FILE
    back = load(tmp_path)
    assert back is not None
    assert back.meta == ck.meta
    assert set(back.arrays) == set(ck.arrays)
    for k, a in ck.arrays.items():
        b = back.arrays[k]
        assert b.dtype == a.dtype, k
        assert b.shape == a.shape, k
        np.testing.assert_array_equal(b, a)


def test_save_creates_folder_and_leaves_no_tmp(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "b"
    save(folder, _ckpt())
    assert sorted(p.name for p in folder.iterdir()) == [FILE]


def test_load_missing_returns_none(tmp_path: Path) -> None:
    assert load(tmp_path) is None
    assert load(tmp_path / "does-not-exist") is None


def test_second_save_replaces_first(tmp_path: Path) -> None:
    save(tmp_path, _ckpt(1))
    second = Checkpoint({"round": 2}, {"only": np.ones(2, np.float32)})
    save(tmp_path, second)
    back = load(tmp_path)
    assert back is not None
    assert back.meta == {"round": 2}
    assert list(back.arrays) == ["only"]  # nothing of the first checkpoint survives
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILE]


def test_stale_tmp_from_killed_write_does_not_affect_load_or_save(tmp_path: Path) -> None:
    save(tmp_path, _ckpt(1))
    (tmp_path / (FILE + ".tmp")).write_bytes(b"half-written garbage")
    back = load(tmp_path)
    assert back is not None and back.meta["round"] == 1
    save(tmp_path, _ckpt(2))
    back = load(tmp_path)
    assert back is not None and back.meta["round"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILE]


def test_failed_save_keeps_previous_checkpoint(tmp_path: Path) -> None:
    save(tmp_path, _ckpt(1))
    with pytest.raises(TypeError):
        save(tmp_path, Checkpoint({"round": 2, "bad": object()}, {}))  # meta not JSON-serializable
    back = load(tmp_path)
    assert back is not None and back.meta["round"] == 1


def test_file_is_a_plain_npz_with_json_meta(tmp_path: Path) -> None:
    save(tmp_path, _ckpt(4))
    with np.load(tmp_path / FILE, allow_pickle=False) as data:
        assert sorted(data.files) == sorted(["meta", *(f"a/{k}" for k in _ckpt().arrays)])
        assert data["meta"].dtype.kind == "U"
        assert json.loads(str(data["meta"]))["round"] == 4


def test_load_refuses_pickled_object_arrays(tmp_path: Path) -> None:
    # A checkpoint file holding an object array (which needs pickle) must not be unpickled.
    with open(tmp_path / FILE, "wb") as fh:
        np.savez(fh, meta=np.array(json.dumps({"round": 1})), **{"a/x": np.array([{"evil": 1}], dtype=object)})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="allow_pickle"):
        load(tmp_path)


def test_save_refuses_object_arrays_and_keeps_previous_checkpoint(tmp_path: Path) -> None:
    # BUG (fedrl/storage/checkpoint.py, save): np.savez pickles object arrays by default, so save()
    # writes a file that load() (allow_pickle=False) cannot read, and os.replace has already
    # destroyed the previous good checkpoint. save should refuse non-pickle-free arrays before
    # touching the folder.
    save(tmp_path, _ckpt(1))
    with pytest.raises((ValueError, TypeError)):
        save(tmp_path, Checkpoint({"round": 2}, {"x": np.array([None, 1.0], dtype=object)}))
    back = load(tmp_path)
    assert back is not None and back.meta["round"] == 1
