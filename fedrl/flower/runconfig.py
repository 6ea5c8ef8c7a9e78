"""A run config as Flower will see it: the app's pyproject defaults plus overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomllib
from flwr.common.config import flatten_dict, parse_config_args

from fedrl.errors import ConfigError


def merged_run_config(app: Path, overrides: list[str]) -> dict[str, Any]:
    """Flatten ``[tool.flwr.app.config]`` of ``app/pyproject.toml`` and apply overrides
    parsed exactly as ``flwr run --run-config`` parses them."""
    pyproject = app / "pyproject.toml"
    if not pyproject.exists():
        raise ConfigError("app", f"no pyproject.toml in {app.resolve()}")
    data = tomllib.loads(pyproject.read_text())
    defaults = flatten_dict(data.get("tool", {}).get("flwr", {}).get("app", {}).get("config", {}))
    try:
        parsed = parse_config_args(overrides or None)
    except Exception as err:  # Flower raises bare exceptions for malformed overrides
        raise ConfigError("--run-config", f"cannot parse {overrides}: {err}") from err
    return {**defaults, **flatten_dict(parsed)}
