"""Environments: families of physical variants, the ``env.vary`` spec language, builders."""

from __future__ import annotations

from fedrl.envs.families import (
    Family,
    check_env_id,
    check_params,
    check_values,
    family_for,
)
from fedrl.envs.make import (
    EpisodeStats,
    finished_episodes,
    make_env,
    make_vector_env,
    next_observations,
)
from fedrl.envs.spec import ParamSpec, parse_kwargs, parse_vary, sample_variant

__all__ = [
    "EpisodeStats",
    "Family",
    "ParamSpec",
    "check_env_id",
    "check_params",
    "check_values",
    "family_for",
    "finished_episodes",
    "make_env",
    "make_vector_env",
    "next_observations",
    "parse_kwargs",
    "parse_vary",
    "sample_variant",
]
