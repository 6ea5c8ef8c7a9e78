"""``fedrl``: check a run config before Flower sees it, then hand over to ``flwr run``.

    fedrl check [APP] [--run-config ...]     only the checks (exit 2 on a bad config)
    fedrl check --list                       every key with its default and help, then which
                                             features combine (requires, excludes, why)
    fedrl run [APP] [SUPERLINK] [flwr run options]   check, then `flwr run ... --stream`
    fedrl central [APP] [--run-config ...]   the centralized baseline, no Flower
    fedrl export RUN_DIR [--which best|final] [--format torchscript|onnx] [--out DIR]
                                             the run's best (default) or final policy,
                                             runnable without fedrl
    fedrl compare RUN_DIR... [--metric eval_min_return] [--x env_steps|round|wall_time_s] [--out FILE.png]
                                             runs grouped by all but their seed: median and
                                             min-max band per group, and a table
    fedrl certs --out DIR --host HOST --nodes N [--force]
                                             development TLS certificates and SuperNode keys

Flower's SuperLink rejects an undeclared run-config key without naming it; fedrl names
it and suggests the nearest known key.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

from fedrl.config import DEFAULTS, HELP
from fedrl.errors import ConfigError

USAGE = __doc__ or ""
COMMANDS = ("check", "run", "central", "export", "compare", "certs")

# Offline-safe settings Flower reads when the local SuperLink starts.
FLOWER_ENV = {"FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_DISABLE_UPDATE_CHECK": "1"}


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one ``ConfigError`` line instead of usage + error."""

    def error(self, message: str) -> NoReturn:
        # argparse says "argument --x: why", "the following arguments are required: a, b" or
        # "unrecognized arguments: --y"; lead with the argument, as every fedrl error leads with its key
        for pattern, why in ((r"argument (\S+?): (.*)", None), (r"the following arguments are required: (.*)()",
                             "required"), (r"unrecognized arguments: (.*)()", "not an argument of this command")):
            if m := re.fullmatch(pattern, message):
                raise ConfigError(m.group(1), f"{why or m.group(2)} (see {self.prog} --help)")
        raise ConfigError("arguments", f"{message} (see {self.prog} --help)")


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
        from fedrl.features import FEATURES
        from fedrl.features.compat import table
        from fedrl.features.components import declarations_table

        for k, v in DEFAULTS.items():
            print(f"{k:<24} {v!r:<28} {HELP[k]}")
        print()
        print("\n".join(table(FEATURES)))
        print()
        print("\n".join(declarations_table()))
        return 0
    if cmd == "export":
        return _export(rest)
    if cmd == "certs":
        return _certs(rest)
    if cmd == "compare":
        return _compare(rest)
    if cmd not in COMMANDS:
        print(f"fedrl: unknown command {cmd!r}; one of {', '.join(COMMANDS)} (fedrl --help)", file=sys.stderr)
        return 2
    from fedrl.checks.validate import check, config_warnings

    try:
        cfg = check(resolved_run_config(rest))
    except ConfigError as err:
        print(f"fedrl: invalid run config: {err}", file=sys.stderr)
        return 2
    for warning in config_warnings(cfg):
        print(f"fedrl: warning: {warning}", file=sys.stderr)
    if cmd == "check":
        print("fedrl: run config OK")
        return 0
    if cmd == "central":
        from fedrl.server.centralized import run_centralized

        try:
            run_centralized(cfg)
        except ConfigError as err:  # e.g. resume from a checkpoint that does not fit (RunFileError)
            print(f"fedrl central: {err}", file=sys.stderr)
            return 2
        return 0
    return _hand_over(rest, cfg.output_dir)


def _export(rest: list[str]) -> int:
    from fedrl.runfolder.export import FORMATS, export
    from fedrl.runfolder.final_model import WHICH

    ap = _Parser(prog="fedrl export")
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--which", default="best", choices=list(WHICH),
                    help="best: best_model.npz, the best evaluation's model; final: model.npz")
    ap.add_argument("--format", default="torchscript", choices=FORMATS)
    ap.add_argument("--out", type=Path, default=None, help="default: RUN_DIR/export")
    try:
        args = ap.parse_args(rest)
        out = export(args.run_dir, args.format, args.out, args.which)
    except ConfigError as err:
        print(f"fedrl export: {err}", file=sys.stderr)
        return 2
    print(f"fedrl: wrote {out} ({args.which} policy, policy.json, run_policy.py); "
          f"try: python {out / 'run_policy.py'}")
    return 0


def _compare(rest: list[str]) -> int:
    from fedrl.runfolder.compare import X_AXES, compare

    ap = _Parser(prog="fedrl compare")
    ap.add_argument("run_dirs", type=Path, nargs="*", metavar="RUN_DIR",
                    help="run folders, or folders of run folders (a sweep's runs/)")
    ap.add_argument("--metric", default="eval_min_return", help="a numeric metrics.jsonl field")
    ap.add_argument("--x", default="env_steps", choices=X_AXES)
    ap.add_argument("--out", type=Path, default=Path("compare.png"))
    try:
        args = ap.parse_args(rest)
        lines, out = compare(args.run_dirs, args.metric, args.x, args.out)
    except ConfigError as err:
        print(f"fedrl compare: {err}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    print(f"fedrl: wrote {out}")
    return 0


def _certs(rest: list[str]) -> int:
    from fedrl.flower.certs import main as certs_main  # parses and checks its own arguments (one line, exit 2)

    return certs_main(rest)


def _hand_over(rest: list[str], output_dir: str) -> int:
    """``flwr run`` with the same arguments, streaming, with ``output-dir`` made absolute.

    The ServerApp's working directory is the SuperLink's, not the caller's, so a relative
    ``output-dir`` is resolved here, where the user typed it. ``flwr run --stream`` exits 0
    even when the ServerApp fails; we look the run's status up and exit 1 if it failed.
    """
    env = {**os.environ, **FLOWER_ENV}
    args = ["flwr", "run", *_pairs_for_flower(rest), "--run-config",
            f"output-dir='{Path(output_dir).expanduser().resolve()}'"]
    if "--stream" not in rest:
        args.append("--stream")
    try:
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as err:  # flwr not on PATH, not executable
        print(f"fedrl run: cannot start flwr ({err.strerror or err}); is Flower installed in this environment?",
              file=sys.stderr)
        return 1
    run_id = None
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if run_id is None and (m := re.search(r"Successfully started run (\d+)", line)):
            run_id = m.group(1)
    rc = proc.wait()
    if rc != 0 or run_id is None:
        return rc or 1
    status = _run_status(run_id, rest, env)
    if status is not None and "failed" in status:
        print(f"fedrl: run {run_id} ended with status {status}", file=sys.stderr)
        return 1
    return 0


def _pairs_for_flower(rest: list[str]) -> list[str]:
    """``rest`` with a preset's TOML file replaced by its values as ``key=value`` pairs, since
    ``flwr run`` refuses a TOML file next to the ``output-dir`` pair this command adds."""
    from fedrl.config.overrides import is_toml_file
    from fedrl.flower.runconfig import as_flower_overrides

    _, overrides = _split(rest)
    if not is_toml_file(overrides):
        return rest
    pairs = as_flower_overrides(overrides)[0]
    out: list[str] = []
    for a in rest:
        if a == overrides[0]:
            out.append(pairs)
        elif a == f"--run-config={overrides[0]}":
            out.append(f"--run-config={pairs}")
        else:
            out.append(a)
    return out


def _run_status(run_id: str, rest: list[str], env: dict[str, str]) -> str | None:
    positional, _ = _split(rest)
    cmd = ["flwr", "ls", *(positional[1:2]), "--run-id", run_id, "--format", "json"]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False).stdout
        runs = json.loads(out).get("runs", [])
        return str(runs[0].get("status")) if runs else None
    except (subprocess.SubprocessError, ValueError, OSError, AttributeError):
        return None


if __name__ == "__main__":
    raise SystemExit(main())
