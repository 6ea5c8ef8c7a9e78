"""Errors raised by the secure-aggregation state machines."""

from __future__ import annotations


class SecAggAbort(Exception):
    """The server cannot finish the round without weakening privacy or exactness.

    Nothing is returned for an aborted round; ``reason`` is a one-line explanation.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ClientRefused(ValueError):
    """A client refuses a server request that would break the protocol's guarantees."""


class StageError(RuntimeError):
    """A state machine was driven out of order (a stage called early, late or twice)."""


class ShareRejected(ValueError):
    """An encrypted share failed authentication or carried the wrong round or ids."""
