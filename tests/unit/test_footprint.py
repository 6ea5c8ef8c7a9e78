"""The ClientApp's import path stays small: Flower starts a fresh ClientApp process per message in
deployment, so every import is paid every round (Opacus alone took ~1.5 s of a 3.2 s start)."""

from __future__ import annotations

import subprocess
import sys

from tests.e2e.harness import REPO


def test_the_client_app_does_not_import_opacus_scipy_or_plotting() -> None:
    code = ("import sys, client_app; heavy = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'opacus', 'scipy', 'matplotlib', 'ray', 'pandas'}); print(heavy); sys.exit(1 if heavy else 0)")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_torch_threads_come_from_the_node_config() -> None:
    import pytest

    from fedrl.flower.client import threads

    assert threads({}) == 1 and threads({"threads": 4}) == 4
    for bad in (0, -2, 1.5, "4", True):
        with pytest.raises(ValueError, match="threads"):
            threads({"threads": bad})
