"""Atomic, unhijackable file writes: readers see the old file or the new one, never half of one.

Every file fedrl must not leave torn (checkpoints, node state, results, keys) is written here:

1. ``tempfile.mkstemp`` in the target's own folder: a random name opened with ``O_CREAT | O_EXCL``
   (and ``O_NOFOLLOW``), so a symlink another local user planted at a predictable name such as
   ``<name>.tmp`` is never followed, and the rename below stays on one file system;
2. the mode set on the open descriptor before any byte is written (0600 for state and key files:
   there is no moment when a secret is world-readable);
3. write, flush, ``fsync``; ``os.replace`` onto the target (a rename replaces a symlink planted at
   the target itself, it never writes through it); ``fsync`` of the folder, so the rename survives
   a power cut.

On any error, or an interrupt, the temporary file is removed and the old target is left intact.
Temporary files a killed writer left for the same target (``.<name>.*.tmp``, and ``<name>.tmp``
of fedrl versions before this module) are removed after the next successful write: each target
has one writer (a run folder has one server, a state file one logical node).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from glob import escape as glob_escape
from pathlib import Path
from typing import BinaryIO

PRIVATE = 0o600  # state files and private keys: the owner only
PUBLIC = 0o644  # results, certificates, public keys (less the process umask, as open() would)


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (``os.umask`` sets it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o077)
    os.umask(old)
    return old


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # some file systems and platforms cannot open a folder; the rename is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass  # e.g. EINVAL on file systems without directory fsync
    finally:
        os.close(fd)


def write_with(path: Path, write: Callable[[BinaryIO], object], mode: int = PRIVATE,
               keep: Path | None = None) -> Path:
    """Write ``path`` atomically through ``write(file)``; return ``path``.

    ``mode`` (less the umask) is set before ``write`` runs. With ``keep``, an existing ``path`` is
    first renamed to ``keep`` (the previous copy), then the new file takes its place; a crash
    between the two renames leaves ``keep`` and no ``path``. The folder must exist. Whatever
    ``write`` or the file system raises is re-raised after the temporary file is removed.
    """
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:  # from here on, closing fh closes fd
            os.fchmod(fh.fileno(), mode & ~_umask())
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if keep is not None and path.exists():
            os.replace(path, keep)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    _remove_stale(path)
    return path


def _remove_stale(path: Path) -> None:
    # unlink removes a planted symlink itself, never what it points to
    for stale in [*path.parent.glob(f".{glob_escape(path.name)}.*.tmp"), path.with_name(path.name + ".tmp")]:
        try:
            stale.unlink(missing_ok=True)
        except OSError:
            pass  # e.g. a folder planted at that name: not ours to remove


def write_bytes(path: Path, data: bytes, mode: int = PRIVATE, keep: Path | None = None) -> Path:
    """``write_with`` for a bytes payload."""
    return write_with(path, lambda fh: fh.write(data), mode, keep)


def write_text(path: Path, text: str, mode: int = PUBLIC) -> Path:
    """``write_with`` for UTF-8 text; results are ``PUBLIC`` by default."""
    return write_bytes(path, text.encode("utf-8"), mode)
