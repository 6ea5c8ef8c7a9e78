"""Durable node state: atomic round trip, bound to the run, corrupt or foreign files ignored with a reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedrl.flower.hostile import npy_bomb
from fedrl.storage import durable

STATE: dict[str, np.ndarray] = {"adam.step": np.asarray([12], np.int64), "ef.residual": np.arange(5, dtype=np.float32)}


def test_round_trip_keeps_arrays_and_round(tmp_path: Path) -> None:
    ident = durable.fingerprint(7, {"seed": 0, "nodes.count": 8})
    path = durable.state_path(tmp_path / "state", 3)
    durable.save(path, ident, 4, STATE)
    arrays, rnd, why = durable.load(path, ident)
    assert why is None and rnd == 4 and arrays is not None and sorted(arrays) == sorted(STATE)
    np.testing.assert_array_equal(arrays["ef.residual"], STATE["ef.residual"])
    assert [p.name for p in path.parent.iterdir()] == ["fedrl-node3.npz"]  # no temporary left behind


def test_no_file_is_a_fresh_start_without_a_warning(tmp_path: Path) -> None:
    assert durable.load(tmp_path / "fedrl-node0.npz", "x") == (None, 0, None)


def test_another_run_or_config_is_not_reused(tmp_path: Path) -> None:
    path = durable.state_path(tmp_path, 0)
    durable.save(path, durable.fingerprint(7, {"seed": 0}), 2, STATE)
    for other in (durable.fingerprint(8, {"seed": 0}), durable.fingerprint(7, {"seed": 1})):
        arrays, _, why = durable.load(path, other)
        assert arrays is None and why is not None and "another run or config" in why


def test_a_corrupt_file_is_reported_and_ignored(tmp_path: Path) -> None:
    ident = durable.fingerprint(1, {})
    path = durable.state_path(tmp_path, 0)
    durable.save(path, ident, 1, STATE)
    path.write_bytes(path.read_bytes()[:40])  # truncated mid-write by something other than us
    arrays, _, why = durable.load(path, ident)
    assert arrays is None and why is not None and "unreadable" in why
    path.write_bytes(b"not an npz at all")
    assert durable.load(path, ident)[2] is not None
    durable.save(path, ident, 2, STATE)  # the next save replaces it
    assert durable.load(path, ident)[1] == 2


def test_a_resumed_run_is_the_same_run_but_another_experiment_is_not() -> None:
    base = {"seed": 0, "output-dir": "runs", "run-name": "a", "resume": ""}
    same = durable.fingerprint("uid1", base)
    assert durable.fingerprint("uid1", {**base, "resume": "runs/a", "output-dir": "/elsewhere"}) == same
    assert durable.fingerprint("uid1", {**base, "seed": 1}) != same
    assert durable.fingerprint("uid2", base) != same


def test_a_server_resumed_one_round_back_gets_the_state_before_that_round(tmp_path: Path) -> None:
    ident = durable.fingerprint("uid", {})
    path = durable.state_path(tmp_path, 0)
    for rnd in (1, 2, 3):
        durable.save(path, ident, rnd, {"adam.step": np.asarray([10 * rnd])})
    assert durable.previous_path(path).exists()
    arrays, rnd, why = durable.load(path, ident, before=4)  # the usual case: the latest
    assert (rnd, why, int(arrays["adam.step"][0])) == (3, None, 30)  # type: ignore[index]
    arrays, rnd, why = durable.load(path, ident, before=3)  # round 3 is trained again
    assert (rnd, why, int(arrays["adam.step"][0])) == (2, None, 20)  # type: ignore[index]
    arrays, rnd, why = durable.load(path, ident, before=2)  # nothing old enough is kept
    assert arrays is None and why is not None and "not before round 2" in why
    path.unlink()  # a crash between the two renames of a save: the previous copy is used
    assert durable.load(path, ident)[1] == 2


def _npy_declaring(shape: tuple[int, ...]) -> bytes:
    """A 128-byte .npy whose header claims ``shape`` of float64: numpy would allocate it before reading."""
    return npy_bomb("<f8", shape) + b"\0" * 8


def _zip_of(members: dict[str, bytes]) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_every_kind_of_corruption_is_reported_and_the_node_starts_fresh(tmp_path: Path) -> None:
    ident = durable.fingerprint(1, {})
    path = durable.state_path(tmp_path, 0)
    durable.save(path, ident, 3, STATE)
    good = path.read_bytes()
    flipped = bytearray(good)
    flipped[len(good) // 3] ^= 0xFF  # inside the data of the first array: the zip CRC no longer matches
    with open(tmp_path / "obj.npz", "wb") as fh:
        np.savez(fh, **{"__fedrl.identity": np.frombuffer(ident.encode(), np.uint8), "x": np.array([{}], object)})  # type: ignore[arg-type]
    with open(tmp_path / "negative.npz", "wb") as fh:
        np.savez(fh, **{"__fedrl.identity": np.frombuffer(ident.encode(), np.uint8), "__fedrl.round": np.array([-4])})  # type: ignore[arg-type]
    defects = {
        "empty": b"",
        "truncated in the data": good[: len(good) // 2],
        "truncated in the directory": good[:-10],
        "one flipped byte": bytes(flipped),
        "a bare .npy, not an .npz": _npy_declaring((2,)),
        "a header declaring 10**10 elements": _zip_of({"x.npy": _npy_declaring((10**10,))}),
        "an object array (needs pickle)": (tmp_path / "obj.npz").read_bytes(),
        "a negative round": (tmp_path / "negative.npz").read_bytes(),
    }
    for what, data in defects.items():
        path.write_bytes(data)
        path.with_name(path.stem + ".prev.npz").unlink(missing_ok=True)
        arrays, rnd, why = durable.load(path, ident)
        assert (arrays, rnd) == (None, 0), what
        assert why is not None and why.startswith(f"state file {path} is unreadable (") and why.endswith(
            "; starting fresh") and "\n" not in why, what


def test_state_files_are_0600_and_saves_never_follow_a_planted_link(tmp_path: Path) -> None:
    import stat

    ident = durable.fingerprint(1, {})
    path = durable.state_path(tmp_path, 0)
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep")
    path.with_name(path.name + ".tmp").symlink_to(outside)  # where fedrl used to write its temporary file
    durable.save(path, ident, 1, STATE)
    durable.save(path, ident, 2, STATE)
    assert outside.read_bytes() == b"keep"
    for p in (path, durable.previous_path(path)):
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fedrl-node0.npz", "fedrl-node0.prev.npz", "outside"]
