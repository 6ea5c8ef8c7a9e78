"""A sum tree over replay priorities: O(log n) update, O(log n) proportional sampling.

Prioritized experience replay (Schaul et al., ICLR 2016, proportional variant) samples transition
``i`` with probability ``p_i / sum(p)``. The tree stores ``capacity`` leaves at ``[size, 2 size)``
of one flat array (``size`` the next power of two) and each inner node ``j`` holds the sum of its
children ``2j`` and ``2j + 1``; the root ``1`` holds the total. Updating a leaf walks up one path;
finding the leaf of a prefix sum walks down one, all ``batch`` queries at once in numpy.

Written here rather than taken from a library: TorchRL's segment tree is a C++ extension of a
package fedrl does not otherwise need, and the tree must be plain arrays so that it can live in a
node's ``NodeState`` between rounds (``fedrl.rl.replay``).
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """Non-negative priorities of ``capacity`` slots and their prefix sums."""

    def __init__(self, capacity: int, tree: np.ndarray | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.size = 1 << max(0, (capacity - 1).bit_length())
        if tree is None:
            tree = np.zeros(2 * self.size, np.float64)
        elif tree.shape != (2 * self.size,):
            raise ValueError(f"a tree of capacity {capacity} has {2 * self.size} entries, got {tree.shape}")
        self.tree = tree

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def get(self, idx: np.ndarray) -> np.ndarray:
        """The priorities of slots ``idx``."""
        return self.tree[self.size + np.asarray(idx)]

    def update(self, idx: np.ndarray, priority: np.ndarray) -> None:
        """Set slots ``idx`` to ``priority`` (finite, >= 0) and fix the sums above them: O(k log n).

        A slot named twice keeps its last priority."""
        idx = np.asarray(idx, np.int64).reshape(-1)
        p = np.broadcast_to(np.asarray(priority, np.float64), idx.shape)
        if idx.size and (idx.min() < 0 or idx.max() >= self.capacity):
            raise IndexError(f"slot out of range 0..{self.capacity - 1}")
        if not np.all(np.isfinite(p)) or np.any(p < 0):
            raise ValueError("priorities must be finite and non-negative")
        leaf = self.size + idx
        self.tree[leaf] = p
        node = np.unique(leaf // 2)
        while node.size and node[0] >= 1:
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]
            node = np.unique(node // 2)
            node = node[node >= 1]

    def find(self, mass: np.ndarray) -> np.ndarray:
        """The slot of each prefix sum in ``mass`` (values in ``[0, total)``): the smallest ``i``
        with ``p_0 + ... + p_i > mass``, found by one walk down per query (vectorized)."""
        m = np.asarray(mass, np.float64).copy()
        node = np.ones(m.shape, np.int64)
        while node.size and node[0] < self.size:  # every walk has the same depth
            left = 2 * node
            go_right = m >= self.tree[left]
            m = np.where(go_right, m - self.tree[left], m)
            node = np.where(go_right, left + 1, left)
        slot = node - self.size
        # Float rounding can land a query on an empty slot past the last priority: step back to
        # the last slot that has one.
        bad = (slot >= self.capacity) | (self.tree[node] <= 0)
        if np.any(bad):
            last = int(np.flatnonzero(self.tree[self.size:self.size + self.capacity] > 0)[-1])
            slot = np.where(bad, last, slot)
        return slot

    def sample(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        """``batch`` slots drawn with probability proportional to priority, stratified: one draw
        from each of ``batch`` equal segments of the total (as Schaul et al. do)."""
        total = self.total
        if total <= 0:
            raise ValueError("cannot sample from a tree whose priorities are all zero")
        edges = np.arange(batch, dtype=np.float64) * (total / batch)
        return self.find(edges + rng.random(batch) * (total / batch))
