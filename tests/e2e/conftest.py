from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import LocalFlower


@pytest.fixture
def flower(tmp_path: Path) -> Iterator[LocalFlower]:
    lf = LocalFlower(tmp_path / "flwr-home")
    try:
        yield lf
    finally:
        lf.stop()
