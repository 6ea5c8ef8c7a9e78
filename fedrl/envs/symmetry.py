"""Mirror symmetries of the named environment families (``algo.mirror``).

CartPole, Pendulum and Acrobot are symmetric under reflection: mirror the state (negate the
angles, positions and velocities) and the action (push the other way, swap the torques), and the
next state is the mirror of the one the original pair leads to, with the same reward and the
same termination. Their observations carry the state as odd coordinates (negated by the mirror)
and even ones (``cos`` of an angle, kept), so the mirror is a sign per observation coordinate.

A policy that respects the symmetry cannot hold a preference for one side (van der Pol et al.,
"MDP Homomorphic Networks", NeurIPS 2020, whose example is CartPole's reflection). Under DP noise
a federated policy can drift into one, a cart pushed to the same edge in every episode
(docs/privacy.md, "Mirror-symmetric policies"); ``fedrl.rl.networks`` builds the symmetric policy
from these declarations. ``tests/unit/test_symmetry.py`` checks each against Gymnasium's physics.

MountainCar is not symmetric (its hill is not), and other env ids declare nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mirror:
    """``obs``: +1 or -1 per observation coordinate (the mirrored observation is ``obs * sign``).
    ``action``: for discrete actions, the mirrored action of each action index (a permutation
    that is its own inverse); for continuous actions, +1 or -1 per action dimension."""

    obs: tuple[int, ...]
    action: tuple[int, ...]


_CARTPOLE = Mirror(obs=(-1, -1, -1, -1), action=(1, 0))  # x, x', theta, theta'; push left <-> right
MIRRORS: dict[str, Mirror] = {
    "CartPole-v1": _CARTPOLE,
    "CartPole-v0": _CARTPOLE,
    # cos(theta), sin(theta), theta'; torque u -> -u
    "Pendulum-v1": Mirror(obs=(1, -1, -1), action=(-1,)),
    # cos/sin of both joint angles, both joint velocities; torques -1, 0, +1 -> +1, 0, -1
    "Acrobot-v1": Mirror(obs=(1, -1, 1, -1, -1, -1), action=(2, 1, 0)),
}


def mirror_for(env_id: str) -> Mirror | None:
    """The declared mirror of ``env_id``, or None (no known symmetry)."""
    return MIRRORS.get(env_id)
