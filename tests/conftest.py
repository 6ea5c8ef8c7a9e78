"""Puts ``simulations/`` on ``sys.path``, as running a benchmark script there does.

Tests then import the test and benchmark tooling (``simulations/tooling``: network lab, Flower's
legacy SecAgg+ runner, an in-process SecAgg round) and the benchmark scripts by top-level name,
the way the scripts import them.
"""

from __future__ import annotations

import sys
from pathlib import Path

SIMULATIONS = str(Path(__file__).resolve().parents[1] / "simulations")
if SIMULATIONS not in sys.path:
    sys.path.insert(0, SIMULATIONS)
