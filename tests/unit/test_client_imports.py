"""The ClientApp imports no server-only module (issue 14: wire types apart from the server)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SERVER_ONLY = ("fedrl.federation", "fedrl.flower.server_loop", "fedrl.flower.async_loop", "fedrl.aggregation",
               "fedrl.selection", "fedrl.flower.serverapp", "fedrl.snapshot", "fedrl.rundir")


def test_the_client_app_imports_no_server_module() -> None:
    code = "import sys, client_app; print('\\n'.join(sorted(m for m in sys.modules if m.startswith('fedrl'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout.split()
    assert "fedrl.flower.clientapp" in out
    assert [m for m in out if m.startswith(SERVER_ONLY)] == []
