"""fedrl.storage.atomic: a symlink planted where the writer will write is never followed, the mode is the
requested one from the first byte, and a failed write leaves the old file and no temporary file."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

import pytest

from fedrl.storage.atomic import PRIVATE, PUBLIC, write_bytes, write_text, write_with


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


def _next_temp_names(count: int) -> list[str]:
    """The names ``tempfile.mkstemp`` will try next, without consuming them.

    An attacker who knew tempfile's state could plant links at exactly these names; we can."""
    seq = tempfile._get_candidate_names()  # type: ignore[attr-defined]
    state = seq.rng.getstate()
    names = [next(seq) for _ in range(count)]
    seq.rng.setstate(state)
    return names


def test_symlinks_planted_at_every_predictable_and_the_next_random_temp_name_are_not_followed(
        tmp_path: Path) -> None:
    folder, outside = tmp_path / "run", tmp_path / "outside.txt"
    folder.mkdir()
    outside.write_bytes(b"not yours")
    target = folder / "checkpoint.npz"
    names = _next_temp_names(6)
    planted = [folder / "checkpoint.npz.tmp", folder / ".checkpoint.npz.tmp", folder / "checkpoint.tmp",
               *(folder / f".checkpoint.npz.{n}.tmp" for n in names[:5])]
    for link in planted:
        link.symlink_to(outside)
    used: list[str] = []

    def write(fh: BinaryIO) -> None:
        used.append(os.readlink(f"/proc/self/fd/{fh.fileno()}"))
        fh.write(b"new state")

    write_with(target, write)
    assert used == [str(folder / f".checkpoint.npz.{names[5]}.tmp")]  # the 5 planted names were skipped
    assert outside.read_bytes() == b"not yours"
    assert target.read_bytes() == b"new state" and not target.is_symlink()
    # links at fedrl's own stale names are removed (unlink removes a link, never its target); others are left
    assert sorted(p.name for p in folder.iterdir()) == [".checkpoint.npz.tmp", "checkpoint.npz", "checkpoint.tmp"]
    assert outside.read_bytes() == b"not yours"


def test_a_symlink_at_the_target_is_replaced_not_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not yours")
    target = tmp_path / "d" / "state.npz"
    target.parent.mkdir()
    target.symlink_to(outside)
    write_bytes(target, b"mine")
    assert outside.read_bytes() == b"not yours"
    assert not target.is_symlink() and target.read_bytes() == b"mine"


@pytest.mark.parametrize("mode", [PRIVATE, PUBLIC])
def test_the_mode_is_set_before_the_first_byte_is_written(tmp_path: Path, mode: int) -> None:
    seen: list[tuple[int, str]] = []

    def write(fh: BinaryIO) -> None:
        st = os.fstat(fh.fileno())
        seen.append((stat.S_IMODE(st.st_mode), os.readlink(f"/proc/self/fd/{fh.fileno()}")))
        fh.write(b"secret")

    target = tmp_path / "node.key"
    write_with(target, write, mode)
    expected = mode & ~_umask()
    (temp_mode, temp_path), = seen
    assert temp_mode == expected  # the temporary file, before any byte, already has the final mode
    assert Path(temp_path).parent == tmp_path and Path(temp_path).name != "node.key"
    assert stat.S_IMODE(target.stat().st_mode) == expected
    assert target.read_bytes() == b"secret"


def test_private_is_0600_even_under_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        write_bytes(tmp_path / "ca.key", b"k")
        write_text(tmp_path / "summary.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "summary.json").stat().st_mode) == 0o644


@pytest.mark.parametrize("exc", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_an_error_mid_write_leaves_the_old_file_and_no_temporary_file(tmp_path: Path, exc: BaseException) -> None:
    target = tmp_path / "checkpoint.npz"
    write_bytes(target, b"round 1")

    def write(fh: BinaryIO) -> None:
        fh.write(b"round 2, half of it")
        raise exc

    with pytest.raises(type(exc)):
        write_with(target, write)
    assert target.read_bytes() == b"round 1"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.npz"]


def test_keep_moves_the_previous_file_aside(tmp_path: Path) -> None:
    target, prev = tmp_path / "fedrl-node0.npz", tmp_path / "fedrl-node0.prev.npz"
    write_bytes(target, b"v1", keep=prev)
    assert not prev.exists()
    write_bytes(target, b"v2", keep=prev)
    assert (target.read_bytes(), prev.read_bytes()) == (b"v2", b"v1")
    assert stat.S_IMODE(prev.stat().st_mode) == 0o600
