"""The ClientApp imports no server-side module (issue 14: wire types apart from the server).

``client_app`` is imported in a fresh interpreter that records, for every module it loads, the
module whose import statement loaded it first, so a failure names the whole chain
(``client_app -> fedrl.flower.clientapp -> ... -> fedrl.secagg.server``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Server-side modules and packages (a package name covers everything under it).
SERVER_ONLY = (
    "fedrl.server",  # the federation, its round, reply checks, selection, run folder and checkpoint
    "fedrl.aggregation",  # aggregation rules
    "fedrl.rules",  # server rules (their names are in fedrl.registry)
    "fedrl.privacy.server",  # central DP mechanisms and ledger
    "fedrl.secagg.server",  # the secure-aggregation server's state machine
    "fedrl.topology.hierarchy",  # edge assignment, cloud averaging
    "fedrl.flower.server_loop",
    "fedrl.flower.plain_exchange",
    "fedrl.flower.async_exchange",
    "fedrl.flower.secure_exchange",
    "fedrl.flower.serverapp",
)
# Server-side modules the ClientApp may load anyway: none (the config's choices come from fedrl.registry,
# which loads no rule).
CLIENT_MAY_LOAD: frozenset[str] = frozenset()

# Server-side modules the ClientApp loads today, each with the chain that loads it; its owner removes
# the entry with the fix. Empty: a new entry needs a reason, and a stale one fails below.
KNOWN_VIOLATIONS: dict[str, str] = {}

_PROBE = """
import builtins, json, sys
loader = {}
real = builtins.__import__
def spy(name, globals=None, locals=None, fromlist=(), level=0):
    before = set(sys.modules)
    module = real(name, globals, locals, fromlist, level)
    importer = (globals or {}).get("__name__", "?")
    for new in set(sys.modules) - before:
        loader.setdefault(new, importer)  # an inner import records first: the nearest importer wins
    return module
builtins.__import__ = spy
import client_app
print(json.dumps({m: loader.get(m, "?") for m in sys.modules if m.startswith("fedrl")}))
"""


def server_only(module: str) -> bool:
    return module not in CLIENT_MAY_LOAD and any(module == p or module.startswith(p + ".") for p in SERVER_ONLY)


def chain(loader: dict[str, str], module: str) -> str:
    path = [module]
    while path[-1] in loader and loader[path[-1]] not in path:
        path.append(loader[path[-1]])
    return " -> ".join(reversed(path))


def test_the_client_app_imports_no_server_module() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout
    loader: dict[str, str] = json.loads(out.strip().splitlines()[-1])
    assert "fedrl.flower.clientapp" in loader
    loaded = {m for m in loader if server_only(m)}
    new = sorted(loaded - set(KNOWN_VIOLATIONS))
    assert not new, "the ClientApp loads server-side modules:\n" + "\n".join(chain(loader, m) for m in new)
    gone = sorted(set(KNOWN_VIOLATIONS) - loaded)
    assert not gone, f"no longer loaded by the ClientApp, remove from KNOWN_VIOLATIONS: {gone}"


def test_the_chain_names_who_loaded_what() -> None:
    loader = {"fedrl.secagg.server": "fedrl.secagg", "fedrl.secagg": "fedrl.flower.secure_client",
              "fedrl.flower.secure_client": "client_app"}
    assert chain(loader, "fedrl.secagg.server") == "client_app -> fedrl.flower.secure_client -> fedrl.secagg -> " \
                                                   "fedrl.secagg.server"
    assert server_only("fedrl.aggregation.robust") and server_only("fedrl.rules.star")
    assert not server_only("fedrl.registry.rules") and not server_only("fedrl.privacy.node")
