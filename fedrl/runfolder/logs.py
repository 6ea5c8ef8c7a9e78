"""Logging setup for fedrl's own logger (Flower configures its own)."""

from __future__ import annotations

import logging
import sys


def setup_logging(level: int = logging.INFO) -> None:
    log = logging.getLogger("fedrl")
    if not log.handlers:
        h = logging.StreamHandler(sys.stdout)
        h.setFormatter(logging.Formatter("fedrl %(levelname)s: %(message)s"))
        log.addHandler(h)
    log.setLevel(level)
    log.propagate = False
