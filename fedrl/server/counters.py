"""A run's counters: env steps, bytes on the wire and wall time, kept across resumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Counters:
    """Cumulative over the whole run (a resumed run continues them from its checkpoint).

    Bytes are what crosses the wire (``fedrl.flower.codec.wire_bytes`` of each message)."""

    env_steps: int = 0
    bytes_up: int = 0  # node -> server
    bytes_down: int = 0  # server -> node
    wall_time_s: float = 0.0  # of the processes that ran the run, before this one's share

    def received(self, nbytes: int) -> None:
        self.bytes_up += nbytes

    def sent(self, nbytes: int) -> None:
        self.bytes_down += nbytes

    def trained(self, env_steps: int) -> None:
        self.env_steps += env_steps

    def ran(self, seconds: float) -> None:
        self.wall_time_s += seconds

    def state_dict(self) -> dict[str, Any]:
        return {"env_steps": self.env_steps, "bytes_up": self.bytes_up, "bytes_down": self.bytes_down,
                "wall_time_s": self.wall_time_s}

    def load_state_dict(self, meta: dict[str, Any]) -> None:
        self.env_steps = int(meta["env_steps"])
        self.bytes_up = int(meta["bytes_up"])
        self.bytes_down = int(meta["bytes_down"])
        self.wall_time_s = float(meta["wall_time_s"])
