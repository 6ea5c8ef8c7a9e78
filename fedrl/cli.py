"""``fedrl``: check a run config before Flower sees it, then hand over to ``flwr run``.

    fedrl check [APP] [--run-config ...]     only the checks (exit 2 on a bad config)
    fedrl check --list                       every key with its default and help
    fedrl run [APP] [SUPERLINK] [flwr run options]   check, then `flwr run ... --stream`
    fedrl central [APP] [--run-config ...]   the centralized baseline, no Flower

Flower's SuperLink rejects an undeclared run-config key without naming it; fedrl names
it and suggests the nearest known key.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fedrl.config import DEFAULTS, HELP
from fedrl.errors import ConfigError

USAGE = __doc__ or ""

# Offline-safe settings Flower reads when the local SuperLink starts.
FLOWER_ENV = {"FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_DISABLE_UPDATE_CHECK": "1"}


def _split(args: list[str]) -> tuple[list[str], list[str]]:
    """(positional args, run-config override strings) from flwr-run-style arguments."""
    positional, overrides = [], []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--run-config", "-c"):
            if i + 1 >= len(args):
                raise ConfigError("--run-config", "needs a value")
            overrides.append(args[i + 1])
            i += 2
            continue
        if a.startswith("--run-config="):
            overrides.append(a.split("=", 1)[1])
        elif a in ("--federation", "--federation-config", "--format"):
            i += 2
            continue
        elif not a.startswith("-"):
            positional.append(a)
        i += 1
    return positional, overrides


def resolved_run_config(args: list[str]) -> dict[str, object]:
    """pyproject defaults of the app, overridden as ``flwr run --run-config`` would."""
    from fedrl.flower.runconfig import merged_run_config

    positional, overrides = _split(args)
    app = Path(positional[0]) if positional else Path(".")
    return merged_run_config(app, overrides)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "check" and "--list" in rest:
        for k, v in DEFAULTS.items():
            print(f"{k:<24} {v!r:<28} {HELP[k]}")
        return 0
    if cmd not in ("check", "run", "central"):
        print(f"fedrl: unknown command '{cmd}'\n{USAGE}", file=sys.stderr)
        return 2
    from fedrl.validate import check

    try:
        cfg = check(resolved_run_config(rest))
    except ConfigError as err:
        print(f"fedrl: invalid run config: {err}", file=sys.stderr)
        return 2
    if cmd == "check":
        print("fedrl: run config OK")
        return 0
    if cmd == "central":
        from fedrl.centralized import run_centralized

        run_centralized(cfg)
        return 0
    env = {**os.environ, **FLOWER_ENV}
    flwr_args = ["flwr", "run", *rest]
    if "--stream" not in rest:
        flwr_args.append("--stream")
    os.execvpe("flwr", flwr_args, env)
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
