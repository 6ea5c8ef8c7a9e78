from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import LocalFlower, kill_all, pids_with_home


@pytest.fixture(scope="session")
def _local_flower(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFlower]:
    """One private local SuperLink for the session: starting one costs ~7 s, and ~30 tests use it."""
    lf = LocalFlower(tmp_path_factory.mktemp("flwr") / "flwr-home")
    try:
        yield lf
    finally:
        lf.stop()


@pytest.fixture
def flower(_local_flower: LocalFlower) -> Iterator[LocalFlower]:
    """The shared local SuperLink; after each test, any run it left behind (a timed-out or killed
    test) is stopped, so the next test never shares the machine with it."""
    yield _local_flower
    kill_all([pid for pid in pids_with_home(_local_flower.home) if _is_run(pid)])


def _is_run(pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return any(s in cmd for s in (b"flwr-simulation", b"/ray/", b"ray::", b"flwr-serverapp", b"flwr-clientapp"))
