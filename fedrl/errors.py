"""Errors raised at the edges of fedrl (config parsing, run building)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A run-config key has an unknown name, a malformed value or an impossible combination.

    ``str(err)`` is one line that starts with the offending key, so the CLI can print it as is.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.reason = message


class RunFileError(ConfigError):
    """A file fedrl reads back (a checkpoint, ``metrics.jsonl``) is torn, corrupt or does not fit
    the run's config.

    ``str(err)`` is one line: the file, the field, what is wrong. ``key`` is the field.
    """

    def __init__(self, path: object, field: str, message: str) -> None:
        ValueError.__init__(self, f"{path}: {field}: {message}")
        self.key = field
        self.reason = message
        self.path = str(path)
