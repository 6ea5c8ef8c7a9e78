"""A node's replay buffer: bounded, uniform or prioritized, kept between rounds as plain arrays.

The buffer is a ring of ``capacity`` n-step transitions (``fedrl.rl.nstep``); once full, the
oldest is overwritten. With ``alpha > 0`` it is prioritized (Schaul et al., ICLR 2016,
proportional): transition ``i`` is drawn with probability ``p_i^alpha / sum p^alpha`` through a
sum tree (``fedrl.rl.sum_tree``), new transitions enter with the largest priority seen so far
(so each is replayed at least once soon), and each draw carries the importance weight
``(N P(i))^-beta / max_j (N P(j))^-beta`` that corrects the bias of non-uniform replay; the
caller anneals ``beta`` to 1. ``alpha = 0`` is uniform replay with weights 1.

What it costs: ``capacity * (2 obs_dim + action_dim + 2)`` float32 plus, prioritized, a float64
tree of ``4 capacity`` entries at most; CartPole with 50,000 slots is 2.2 MB (+1.6 MB of tree).
It lives in the node's ``NodeState`` (``to_state``/``from_state``), so in Flower's
``context.state`` and, with ``--node-config state-dir``, on the SuperNode's disk: it never leaves
the node.
"""

from __future__ import annotations

import numpy as np

from fedrl.rl.nstep import Transitions
from fedrl.rl.sum_tree import SumTree

_FIELDS = ("obs", "action", "reward", "discount", "next_obs")
PREFIX = "replay."


class Replay:
    """A ring of transitions, sampled uniformly (``alpha = 0``) or by priority."""

    def __init__(self, capacity: int, obs_dim: int, action_dim: int, alpha: float = 0.0, eps: float = 1e-6) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity, self.alpha, self.eps = capacity, alpha, eps
        self.data = {
            "obs": np.zeros((capacity, obs_dim), np.float32),
            "action": np.zeros((capacity, action_dim), np.float32),
            "reward": np.zeros(capacity, np.float32),
            "discount": np.zeros(capacity, np.float32),
            "next_obs": np.zeros((capacity, obs_dim), np.float32),
        }
        self.pos = 0  # the next slot written
        self.count = 0  # slots filled
        self.tree = SumTree(capacity) if alpha > 0 else None
        self.max_priority = 1.0

    def __len__(self) -> int:
        return self.count

    def add(self, t: Transitions) -> None:
        """Append a batch (the oldest transitions are overwritten once the ring is full)."""
        b = len(t)
        if b == 0:
            return
        if b > self.capacity:  # only the newest capacity of them can stay
            t = Transitions(*(getattr(t, f)[-self.capacity:] for f in _FIELDS))
            b = self.capacity
        idx = (self.pos + np.arange(b)) % self.capacity
        for f in _FIELDS:
            self.data[f][idx] = getattr(t, f).reshape(self.data[f][idx].shape)
        self.pos = int((self.pos + b) % self.capacity)
        self.count = min(self.capacity, self.count + b)
        if self.tree is not None:
            self.tree.update(idx, np.full(b, self.max_priority ** self.alpha))

    def sample(self, batch: int, beta: float, rng: np.random.Generator) -> tuple[np.ndarray, Transitions, np.ndarray]:
        """``(slots, transitions, importance weights)`` of ``batch`` draws (with replacement)."""
        if self.count == 0:
            raise ValueError("cannot sample an empty replay buffer")
        if self.tree is None:
            idx = rng.integers(0, self.count, batch)
            weights = np.ones(batch, np.float32)
        else:
            idx = self.tree.sample(batch, rng)
            prob = self.tree.get(idx) / self.tree.total
            w = (self.count * prob) ** -beta
            weights = (w / w.max()).astype(np.float32)
        return idx, Transitions(*(self.data[f][idx] for f in _FIELDS)), weights

    def update_priorities(self, idx: np.ndarray, td_error: np.ndarray) -> None:
        """New priorities ``|td_error| + eps`` for the sampled slots (prioritized buffers only)."""
        if self.tree is None:
            return
        p = np.abs(np.asarray(td_error, np.float64)) + self.eps
        p = np.where(np.isfinite(p), p, self.max_priority)
        self.max_priority = max(self.max_priority, float(p.max()))
        self.tree.update(idx, p ** self.alpha)

    # --- node state -------------------------------------------------------------------------
    def to_state(self) -> dict[str, np.ndarray]:
        """The buffer as ``NodeState`` arrays (only the filled slots of the data)."""
        n = self.count
        out: dict[str, np.ndarray] = {f"{PREFIX}{f}": self.data[f][:n].copy() for f in _FIELDS}
        out[f"{PREFIX}meta"] = np.array([self.pos, self.count, self.max_priority], np.float64)
        if self.tree is not None:  # raw priorities (|td| + eps): a resumed run may use another alpha
            out[f"{PREFIX}priority"] = self.tree.get(np.arange(n)) ** (1.0 / self.alpha)
        return out

    @staticmethod
    def from_state(arrays: dict[str, np.ndarray], capacity: int, obs_dim: int, action_dim: int,
                   alpha: float = 0.0) -> Replay:
        """The buffer a node kept (an empty one if it has none yet).

        Raises:
            ValueError: stored arrays that do not fit this buffer's shape (another env, or a
                changed capacity between a run and its resume).
        """
        buf = Replay(capacity, obs_dim, action_dim, alpha)
        meta = arrays.get(f"{PREFIX}meta")
        if meta is None:
            return buf
        pos, count, max_p = int(meta[0]), int(meta[1]), float(meta[2])
        if not (0 <= count <= capacity and 0 <= pos < capacity and (count == capacity or pos == count % capacity)):
            raise ValueError(f"stored replay buffer (count {count}, position {pos}) does not fit capacity {capacity}")
        for f in _FIELDS:
            a = arrays[f"{PREFIX}{f}"]
            if a.shape != (count, *buf.data[f].shape[1:]):
                raise ValueError(f"stored replay '{f}' has shape {a.shape}, expected {(count, *buf.data[f].shape[1:])}")
            buf.data[f][:count] = a
        buf.pos, buf.count, buf.max_priority = pos, count, max_p
        if buf.tree is not None and count:
            pri = arrays.get(f"{PREFIX}priority")
            pri = np.full(count, max_p) if pri is None or pri.shape != (count,) else pri
            buf.tree.update(np.arange(count), pri ** alpha)
        return buf
