"""A run config as Flower will see it: the app's pyproject defaults plus overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomllib
from flwr.common.config import flatten_dict, parse_config_args

from fedrl.config.overrides import as_pairs, check_override, is_toml_file
from fedrl.errors import ConfigError


def merged_run_config(app: Path, overrides: list[str]) -> dict[str, Any]:
    """Flatten ``[tool.flwr.app.config]`` of ``app/pyproject.toml`` and apply overrides
    parsed exactly as ``flwr run --run-config`` parses them.

    Raises:
        ConfigError: ``app`` when its pyproject.toml is missing, unreadable or not TOML;
            ``--run-config`` for text Flower's parser would drop (``fedrl.config.overrides``) or refuses.
    """
    pyproject = app / "pyproject.toml"
    if not pyproject.is_file():
        raise ConfigError("app", f"no pyproject.toml in {app.resolve()}")
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        defaults = flatten_dict(data.get("tool", {}).get("flwr", {}).get("app", {}).get("config", {}))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError, AttributeError) as err:
        raise ConfigError("app", f"cannot read {pyproject}: {err}") from None
    if not is_toml_file(overrides):
        for text in overrides:
            check_override(text)
    try:
        parsed = parse_config_args(overrides or None)
    except Exception as err:  # noqa: BLE001 - Flower raises bare exceptions for malformed overrides
        why = " ".join(str(err).split()) or type(err).__name__  # one line
        raise ConfigError("--run-config", f"cannot parse {overrides}: {why}") from None
    return {**defaults, **flatten_dict(parsed)}


def as_flower_overrides(overrides: list[str]) -> list[str]:
    """``overrides`` as ``flwr run`` may take them together with more pairs: a TOML file becomes
    the ``key=value`` string of its values (Flower refuses a TOML file next to any pair), other
    overrides stay as they are.

    Raises:
        ConfigError: ``--run-config`` for a file Flower cannot read or a value no pair can carry.
    """
    if not is_toml_file(overrides):
        return overrides
    try:
        values = flatten_dict(parse_config_args(overrides))
    except Exception as err:  # noqa: BLE001 - Flower raises bare exceptions for unreadable files
        raise ConfigError("--run-config", f"cannot read {overrides[0]}: {' '.join(str(err).split())}") from None
    return [as_pairs(values)]
