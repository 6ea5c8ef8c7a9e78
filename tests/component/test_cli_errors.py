"""Bad input to a fedrl command is one line naming the argument, key or file and field, exit 2, never a
traceback: ``fedrl check`` on values Flower would drop or cannot carry and on environments that fail at
make/reset/step, and ``fedrl export`` on a tampered run folder (issue 15)."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from flwr.common.config import parse_config_args

from fedrl.cli import main
from fedrl.config import from_run_config
from fedrl.config.overrides import FLOWER_PAIR, check_override
from fedrl.flower.hostile import npy_bomb
from fedrl.model.moments import Moments
from fedrl.runfolder.results import BEST_MODEL, MODEL, RunFolder
from fedrl.server.federation import Federation
from fedrl.server.rundir import resolved_config

REPO = Path(__file__).resolve().parents[2]
FEDRL = str(Path(sys.executable).parent / "fedrl")


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``fedrl argv`` in-process; it must exit 2 with exactly one line on stderr and no traceback."""
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert "Traceback" not in out + err
    assert len(err.splitlines()) == 1, err
    assert out == ""
    return err.strip()


# --- fedrl check ---------------------------------------------------------------------------------
PYGAME = importlib.util.find_spec("pygame") is not None


@pytest.mark.parametrize(("override", "must_contain"), [
    # values Flower records cannot carry (signed 64-bit ints)
    ("num-server-rounds=100000000000000000000000", ["num-server-rounds", "64-bit"]),
    ("seed=1e30", ["seed", "64-bit"]),
    ("run-name=99999999999999999999999", ["run-name", "64-bit"]),
    # text Flower's parser drops without a word
    ("num-server-rounds=", ["--run-config", "'num-server-rounds='", "no value"]),
    ("num-server-rounds=5 garbage", ["--run-config", "'garbage'", "not key=value"]),
    ("env.vary='length=uniform(0.2, 0.5)", ["--run-config", "unclosed ' quote"]),
    ("seed=1#2", ["--run-config", "'#'", "comment"]),
    ("seed=1'x'", ["--run-config", "cannot parse"]),
    ("run-name='a'seed=2", ["--run-config", "no space before 'seed=2'"]),
    ("num-server-rounds=[1,2]", ["--run-config", "cannot parse"]),
    ("seed=1979-05-27", ["--run-config", "cannot parse"]),
    # environments that fail at make, reset or step, or cannot be served by one policy
    ("env.kwargs='max_episode_steps=0'", ["env.kwargs", "max_episode_steps", "positive"]),
    ("env.kwargs='render_mode=5'", ["env.kwargs", "render_mode"]),
    pytest.param("env.kwargs='render_mode=human'", ["env.kwargs", "reset or step", "pygame"],
                 marks=pytest.mark.skipif(PYGAME, reason="pygame is installed here: human rendering can work")),
    ("env.vary='length=1e300'", ["env.vary", "non-finite observations"]),
    ("env.id='FrozenLake-v1' env.vary=''", ["env.id", "flat Box"]),
    # sizes nothing downstream could hold
    ("algo.hidden='100000,100000'", ["algo.hidden", "20001500003 parameters", "67108864"]),
    ("nodes.count=10000000000", ["nodes.count", "[1, 10000]"]),
])
def test_check_refuses_in_one_line(override: str, must_contain: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_line(capsys, ["check", str(REPO), "--run-config", override])
    assert line.startswith("fedrl: invalid run config: ")
    for word in must_contain:
        assert word in line, line


@pytest.mark.parametrize("override", ["num-server-rounds=", "num-server-rounds=5 garbage", "seed=1#2",
                                      "run-name='a'seed=2", "env.vary='length=uniform(0.2, 0.5)"])
def test_refused_override_text_is_what_flower_would_drop_or_refuse(override: str) -> None:
    # The refusal is not vacuous: Flower itself keeps fewer pairs, or other values, than were written.
    with pytest.raises(ValueError, match="--run-config"):
        check_override(override)
    try:
        parsed = parse_config_args([override])
    except Exception:  # noqa: BLE001 - a refusal by Flower (click) is the other acceptable outcome
        return
    written = {"num-server-rounds=": {"num-server-rounds": None}, "num-server-rounds=5 garbage":
               {"num-server-rounds": 5, "garbage": None}, "seed=1#2": {"seed": 12},
               "run-name='a'seed=2": {"run-name": "a'seed=2"}}[override]
    assert parsed != written


def test_flower_parser_pattern_is_the_one_we_reproduce() -> None:
    found = re.findall(r"re\.compile\((r\".*?\")\)", inspect.getsource(parse_config_args))
    assert [ast.literal_eval(literal) for literal in found] == [FLOWER_PAIR.pattern]


def test_check_accepts_what_flower_keeps_exactly(capsys: pytest.CaptureFixture[str]) -> None:
    text = "num-server-rounds=3  run-name='a b#c' env.vary=\"length=uniform(0.2, 0.5)\" seed=7"
    assert main(["check", str(REPO), "--run-config", text]) == 0
    assert parse_config_args([text]) == {"num-server-rounds": 3, "run-name": "a b#c",
                                         "env.vary": "length=uniform(0.2, 0.5)", "seed": 7}
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("threshold", "warns"), [(0.5, True), (0.4, True), (0.6, False)])
def test_check_warns_for_a_secagg_threshold_at_or_below_one_half(threshold: float, warns: bool,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", str(REPO), "--run-config",
               f"secagg.enabled=true compression.up='quantize' secagg.threshold={threshold}"])
    out, err = capsys.readouterr()
    assert rc == 0 and out.strip() == "fedrl: run config OK"
    if warns:
        assert len(err.splitlines()) == 1 and err.startswith(f"fedrl: warning: secagg.threshold = {threshold:g}")
        assert "survivor lists" in err and "recover" in err
    else:
        assert err == ""


def test_secagg_off_does_not_warn(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(REPO), "--run-config", "secagg.threshold=0.3"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("argv", "must_contain"), [
    (["check", "/nonexistent-app"], ["app:", "no pyproject.toml"]),
    (["check", str(REPO), "--run-config"], ["--run-config", "needs a value"]),
    (["check", str(REPO), "--run-config", "run-name=missing.toml"], ["--run-config", "missing.toml"]),
    (["bogus"], ["unknown command 'bogus'", "check"]),
    (["export"], ["run_dir", "required"]),
    (["export", "/tmp", "--format", "gif"], ["--format", "invalid choice"]),
    (["export", "/tmp", "--bogus"], ["--bogus", "not an argument"]),
    (["export", "/tmp", "--out"], ["--out", "expected one argument"]),
    (["export", "/tmp", "--which", "last"], ["--which", "invalid choice", "'best', 'final'"]),
])
def test_cli_arguments_are_refused_in_one_line(argv: list[str], must_contain: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_line(capsys, argv)
    for word in must_contain:
        assert word in line, line


def test_a_malformed_pyproject_is_refused_naming_the_app(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.flwr.app.config\nseed = 0\n")
    line = _one_line(capsys, ["check", str(tmp_path)])
    assert "app: cannot read" in line and "pyproject.toml" in line


# --- fedrl export on a tampered run folder ----------------------------------------------------------
def _run_folder(root: Path, env: str = "cartpole") -> Path:
    """A finished run folder written as a run writes it (RunFolder.write_config and save_model, the
    final model and the best one, here the same)."""
    rc = {"nodes.count": 2} if env == "cartpole" else {"env.id": "Pendulum-v1", "env.vary": "g=linspace(9, 11)",
                                                        "nodes.count": 2}
    fed = Federation(from_run_config(rc))
    folder = RunFolder(root / env)
    folder.write_config(resolved_config(fed))
    extra = {}
    if fed.moments[0] is not None:  # normalization on (the default): statistics of 10 observations
        n = fed.spec.obs_dim
        extra["obs_moments"] = Moments(10.0, np.linspace(0.1, 0.3, n), np.linspace(1.0, 3.0, n)).to_array()
    folder.save_model(fed.names, fed.server_model(), extra)
    folder.save_model(fed.names, fed.server_model(), extra, file=BEST_MODEL)
    return folder.path


def _model(run: Path) -> dict[str, np.ndarray]:
    with np.load(run / "model.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _save_model(run: Path, arrays: dict[str, np.ndarray]) -> None:
    np.savez(run / "model.npz", **arrays)  # type: ignore[arg-type]


def _edit_model(edit: Callable[[dict[str, np.ndarray]], None]) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        arrays = _model(run)
        edit(arrays)
        _save_model(run, arrays)
    return apply


def _edit_config(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        cfg = json.loads((run / "config.json").read_text())
        edit(cfg)
        (run / "config.json").write_text(json.dumps(cfg))
    return apply


W = "policy/actor.0.weight"


def _npy_bomb(run: Path) -> None:
    # a 128-byte .npy header declaring 10^10 float32 values, with no data behind it
    with zipfile.ZipFile(run / "model.npz", "a") as zf:
        zf.writestr("bomb.npy", npy_bomb("<f4", (100000, 100000)))


def _object_array(run: Path) -> None:
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(run / "model.npz", "a") as zf:
        zf.writestr("evil.npy", buf.getvalue())


def _set_nan(a: dict[str, np.ndarray]) -> None:
    a[W][0, 0] = np.nan


def _set_inf(a: dict[str, np.ndarray]) -> None:
    a[W][-1, -1] = np.inf


TAMPER: dict[str, tuple[str, Callable[[Path], None], list[str]]] = {
    # name: (env, tampering, words the one line must contain: file, field, what)
    "model missing": ("cartpole", lambda r: (r / "model.npz").unlink(), ["model.npz", "file", "missing"]),
    "config missing": ("cartpole", lambda r: (r / "config.json").unlink(), ["config.json", "file", "missing"]),
    "model garbled": ("cartpole", lambda r: (r / "model.npz").write_bytes(os.urandom(3000)),
                      ["model.npz", "file", "not a readable .npz"]),
    "model truncated": ("cartpole", lambda r: (r / "model.npz").write_bytes((r / "model.npz").read_bytes()[:4000]),
                        ["model.npz", "file", "not a readable .npz"]),
    "npy header bomb": ("cartpole", _npy_bomb, ["model.npz", "file", "bomb.npy"]),
    "object array": ("cartpole", _object_array, ["model.npz", "file", "evil.npy", "object"]),
    "config garbled": ("cartpole", lambda r: (r / "config.json").write_bytes(b"\xff{not json"),
                       ["config.json", "file", "not readable JSON"]),
    "config not an object": ("cartpole", lambda r: (r / "config.json").write_text("[1, 2]"),
                             ["config.json", "file", "JSON object"]),
    "policy missing": ("cartpole", _edit_config(lambda c: c.pop("policy")), ["config.json", "policy", "missing"]),
    "obs_dim a string": ("cartpole", _edit_config(lambda c: c["policy"].update(obs_dim="4")),
                         ["config.json", "policy.obs_dim", "must be int"]),
    "obs_dim huge": ("cartpole", _edit_config(lambda c: c["policy"].update(obs_dim=10**30)),
                     ["config.json", "policy.obs_dim", "must be in [1, 67108864]"]),
    "hidden huge": ("cartpole", _edit_config(lambda c: c["policy"].update(hidden=[10**6, 10**6])),
                    ["config.json", "policy", "1000000,1000000"]),
    "action kind unknown": ("cartpole", _edit_config(lambda c: c["policy"].update(action_kind="multi")),
                            ["config.json", "policy.action_kind", "discrete or continuous"]),
    "weight names reordered": ("cartpole", _edit_config(lambda c: c["policy"]["weight_names"].reverse()),
                               ["config.json", "policy.weight_names"]),
    "env id missing": ("cartpole", _edit_config(lambda c: c["run_config"].pop("env.id")),
                       ["config.json", "run_config.env.id", "missing"]),
    "array missing": ("cartpole", _edit_model(lambda a: a.pop(W)), ["model.npz", W, "missing"]),
    "array transposed": ("cartpole", _edit_model(lambda a: a.update({W: a[W].T.copy()})),
                         ["model.npz", W, "shape (4, 64)", "(64, 4)"]),
    "NaN weight": ("cartpole", _edit_model(_set_nan), ["model.npz", W, "1 non-finite"]),
    "inf weight": ("cartpole", _edit_model(_set_inf), ["model.npz", W, "1 non-finite"]),
    "int64 weights": ("cartpole", _edit_model(lambda a: a.update({W: a[W].astype(np.int64)})),
                      ["model.npz", W, "dtype int64", "float32"]),
    "string weights": ("cartpole", _edit_model(lambda a: a.update({W: a[W].astype(str)})),
                       ["model.npz", W, "dtype <U"]),
    "bounds not numbers": ("pendulum", _edit_config(lambda c: c["policy"].update(action_low=["-2"])),
                           ["config.json", "policy.action_low", "list of 1 finite numbers"]),
    "bounds inverted": ("pendulum", _edit_config(lambda c: c["policy"].update(action_low=[3.0])),
                        ["config.json", "policy.action_low", "below policy.action_high"]),
    "mirror signs not signs": ("cartpole", _edit_config(lambda c: c["policy"].update(obs_mirror=[2, 1, 1, 1],
                                                                                 action_mirror=[1, 0])),
                               ["config.json", "policy.obs_mirror", "4 signs"]),
    "mirror not an involution": ("cartpole", _edit_config(lambda c: c["policy"].update(obs_mirror=[-1, -1, -1, -1],
                                                                                   action_mirror=[0, 0])),
                                 ["config.json", "policy.action_mirror", "its own inverse"]),
    "mirror action signs": ("pendulum", _edit_config(lambda c: c["policy"].update(obs_mirror=[1, -1, -1],
                                                                              action_mirror=[0.5])),
                            ["config.json", "policy.action_mirror", "1 signs"]),
    "statistics missing": ("pendulum", _edit_model(lambda a: a.pop("obs_moments")),
                           ["model.npz", "obs_moments", "missing"]),
    "statistics negative": ("pendulum", _edit_model(lambda a: a["obs_moments"].__setitem__(-1, -1.0)),
                            ["model.npz", "obs_moments", ">= 0"]),
    "statistics count zero": ("pendulum", _edit_model(lambda a: a["obs_moments"].__setitem__(0, 0.0)),
                              ["model.npz", "obs_moments", "count must be > 0"]),
    "statistics short": ("pendulum", _edit_model(lambda a: a.update(obs_moments=a["obs_moments"][:5])),
                         ["model.npz", "obs_moments", "shape (5,)", "(7,)"]),
}


def test_the_untampered_folder_exports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for env in ("cartpole", "pendulum"):
        run = _run_folder(tmp_path, env)
        assert main(["export", str(run)]) == 0, capsys.readouterr().err
        assert sorted(p.name for p in (run / "export").iterdir()) == ["policy.json", "policy.pt", "run_policy.py"]
        assert json.loads((run / "export" / "policy.json").read_text())["normalized_observations"] is True  # norm-obs auto: on for both


@pytest.mark.parametrize("which", ["final", "best"])
@pytest.mark.parametrize("case", list(TAMPER))
def test_export_refuses_a_tampered_run_folder_in_one_line(case: str, which: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    env, tamper, must_contain = TAMPER[case]
    run = _run_folder(tmp_path, env)
    tamper(run)  # model.npz
    if which == "best":  # the same damage to best_model.npz, the file --which best reads
        if (run / MODEL).exists():
            (run / BEST_MODEL).write_bytes((run / MODEL).read_bytes())
        else:
            (run / BEST_MODEL).unlink()
    line = _one_line(capsys, ["export", str(run), "--which", which])
    assert line.startswith(f"fedrl export: {run}/"), line
    if "model.npz" in must_contain:  # the error names the file this --which reads
        assert line.startswith(f"fedrl export: {run / (BEST_MODEL if which == 'best' else MODEL)}: "), line
    for word in must_contain:
        assert word in line, line
    assert not (run / "export").exists()  # nothing exported, NaN weights least of all


def test_export_of_the_best_model_without_one_names_which(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_folder(tmp_path)
    (run / BEST_MODEL).unlink()
    line = _one_line(capsys, ["export", str(run)])  # --which best is the default
    assert line == (f"fedrl export: --which: best: {run / BEST_MODEL} is missing (no evaluation of this run had "
                    "finite returns, or fedrl was older than issue 13); --which final exports model.npz")
    assert not (run / "export").exists()
    assert main(["export", str(run), "--which", "final"]) == 0
    assert json.loads((run / "export" / "policy.json").read_text())["which"] == "final"


def test_export_refuses_an_output_path_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_folder(tmp_path)
    (tmp_path / "taken").write_text("mine")
    line = _one_line(capsys, ["export", str(run), "--out", str(tmp_path / "taken")])
    assert line == f"fedrl export: --out: {tmp_path / 'taken'} exists and is not a folder; give a folder " \
                   "(it is created if missing)"
    assert (tmp_path / "taken").read_text() == "mine"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_export_refuses_an_unwritable_output_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_folder(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        line = _one_line(capsys, ["export", str(run), "--out", str(locked / "export")])
    finally:
        locked.chmod(0o700)
    assert line == f"fedrl export: --out: cannot write to {locked / 'export'}: Permission denied"


def test_export_refuses_an_output_folder_below_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_folder(tmp_path)
    (tmp_path / "file").write_text("mine")
    line = _one_line(capsys, ["export", str(run), "--out", str(tmp_path / "file" / "export")])
    assert line == f"fedrl export: --out: cannot write to {tmp_path / 'file' / 'export'}: Not a directory"


def test_one_line_through_the_real_command(tmp_path: Path) -> None:
    # stderr of the installed command, warnings and logging included: still one line, no traceback
    run = _run_folder(tmp_path)
    _edit_model(_set_nan)(run)
    for args in (["check", "--run-config", "env.kwargs='max_episode_steps=0'"],
                 ["export", str(run), "--which", "final"]):
        res = subprocess.run([FEDRL, *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
        assert res.returncode == 2 and "Traceback" not in res.stderr + res.stdout
        assert len(res.stderr.splitlines()) == 1, res.stderr
