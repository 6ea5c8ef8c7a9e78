"""The golden same-seed models (tests/golden/) again, with the rounds driven in this process.

``tests/e2e/test_golden_models.py`` runs every case through Flower's Simulation Engine; the
synchronous ones give the same model bit for bit when their rounds go through the real ClientApp
handler and wire codec here (``tests.inprocess``), which takes seconds instead of half a minute a
case. So CI checks the synchronous cases here and, through the engine, one synchronous case (that
both routes agree) and FedBuff, whose loop needs Flower's message pushing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tomllib
import torch

from fedrl.config import from_run_config
from fedrl.server.federation import Federation
from fedrl.server.rundir import model_arrays
from tests.e2e.test_golden_models import BASE, CASES, assert_golden
from tests.inprocess import run_rounds, task  # noqa: F401 - the fixture

SYNCHRONOUS = [name for name in CASES if name != "fedbuff"]
# The goldens' ServerApp process ran with torch's default of 2 threads on a 2-core machine, and the
# orthogonal initialization of the first weights differs in the last bit with the thread count.
SERVER_THREADS = 2


@pytest.fixture
def server_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(SERVER_THREADS)
    yield
    torch.set_num_threads(before)


def run_config(overrides: str) -> dict[str, object]:
    """``flwr run --run-config`` text (``key=value`` pairs, TOML values) as a dict."""
    return tomllib.loads("\n".join(f'"{k}" = {v}' for k, v in (p.split("=", 1) for p in overrides.split())))


@pytest.mark.usefixtures("task", "server_threads")
@pytest.mark.parametrize("name", SYNCHRONOUS)
def test_same_seed_in_process_gives_the_golden_model(name: str) -> None:
    rc = run_config(f"{BASE} {CASES[name]}")
    fed = Federation(from_run_config(rc))
    assert run_rounds(fed, rc, int(rc["num-server-rounds"])) == [{}] * int(rc["num-server-rounds"])
    weights, extra = model_arrays(fed)
    got = {**{f"policy/{n}": w for n, w in zip(fed.names, weights, strict=True)}, **extra}  # as model.npz
    assert_golden(name, got)
