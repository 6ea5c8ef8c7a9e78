"""Generalized advantage estimation (Schulman et al., 2016, arXiv:1506.02438).

Pure functions on ``[T, E]`` arrays (T rollout steps, E parallel environments).
"""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(advantages, returns)``, both ``[T, E]``.

    ``values[t]`` is V(s_t). ``next_values[t]`` is V of the state that followed step t: the
    true final observation when the episode ended at t (the caller evaluates it from the
    vector env's ``final_obs``), else V(s_{t+1}); for the last step, V of the observation
    after the rollout. ``terminated[t]`` (float 0/1) zeroes the bootstrap: a terminal state
    has no future. A truncation (time limit, or the end of a round) keeps it, so
    ``terminated`` must be false there. ``done[t] = terminated or truncated`` cuts the
    λ-trace so no advantage leaks across an episode boundary.
    """
    if not (rewards.shape == values.shape == next_values.shape == terminated.shape == done.shape):
        raise ValueError("gae: all inputs must share one [T, E] shape")
    not_terminal = 1.0 - terminated
    deltas = rewards + gamma * next_values * not_terminal - values
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        running = deltas[t] + gamma * lam * (1.0 - done[t]) * running
        advantages[t] = running
    return advantages, advantages + values
