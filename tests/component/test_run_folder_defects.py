"""Resuming from a damaged run folder: a torn last metrics line is skipped with a warning; a bad
middle line, a checkpoint whose contents do not fit the config and a torn or bit-flipped
checkpoint are each refused with one line naming the file and the field, before any metrics row
is touched."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedrl.config import from_run_config
from fedrl.errors import RunFileError
from fedrl.runfolder.results import METRICS
from fedrl.server.federation import Federation
from fedrl.server.rundir import resolve_run_folder
from fedrl.server.snapshot import snapshot
from fedrl.storage import checkpoint

SMALL = {"nodes.count": 2, "algo.local-steps": 256, "eval.episodes": 1, "num-server-rounds": 5,
         "run-name": "r"}


def _fed(tmp_path: Path, **over: Any) -> Federation:
    return Federation(from_run_config({**SMALL, "output-dir": str(tmp_path), **over}))


def _killed_run(tmp_path: Path, **over: Any) -> Path:
    """A run folder as a run killed after round 2 leaves it: two metrics rows, a round-2 checkpoint."""
    fed = _fed(tmp_path, **over)
    folder = resolve_run_folder(fed)
    for rnd in (1, 2):
        fed.round = rnd
        fed.counters.env_steps, fed.counters.bytes_up, fed.counters.bytes_down = 512 * rnd, 1000 * rnd, 2000 * rnd
        folder.append_metrics({"round": rnd, "env_steps": fed.counters.env_steps})
    fed.models[0][0] = fed.models[0][0] + np.float32(0.25)  # a model that is not the initial one
    checkpoint.save(folder.path, snapshot(fed, 0.0))
    return folder.path


def _resume(tmp_path: Path, **over: Any) -> Federation:
    fed = _fed(tmp_path, resume="true", **over)
    resolve_run_folder(fed)
    return fed


def test_a_torn_last_metrics_line_is_skipped_with_a_warning_and_dropped(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    path = _killed_run(tmp_path)
    with open(path / METRICS, "a") as fh:
        fh.write('{"round": 3, "env_st')  # killed during round 3's append, before its checkpoint
    with caplog.at_level(logging.WARNING, logger="fedrl"):
        fed = _resume(tmp_path)
    assert fed.round == 2 and fed.counters.env_steps == 1024
    torn = f"{path / METRICS}: line 3 is torn (a write cut short); skipping it"
    assert [r.getMessage() for r in caplog.records] == [torn]
    assert (path / METRICS).read_text() == '{"round": 1, "env_steps": 512}\n{"round": 2, "env_steps": 1024}\n'


def test_a_torn_middle_metrics_line_is_refused_naming_the_line(tmp_path: Path) -> None:
    path = _killed_run(tmp_path)
    rows = (path / METRICS).read_text().splitlines()
    damaged = f'{rows[0]}\n{{"round": 2, "env_st\n{rows[1]}\n'
    (path / METRICS).write_text(damaged)
    with pytest.raises(RunFileError) as err:
        _resume(tmp_path)
    assert str(err.value) == (f"{path / METRICS}: line 2: not a metrics row (a JSON object with an integer round); "
                              "repair or remove that line")
    assert (path / METRICS).read_text() == damaged


def _tamper_meta(key: str, value: object) -> Any:
    def edit(ck: checkpoint.Checkpoint) -> checkpoint.Checkpoint:
        return checkpoint.Checkpoint({**ck.meta, key: value}, ck.arrays)
    return edit


def _tamper_array(name: str, how: Any) -> Any:
    def edit(ck: checkpoint.Checkpoint) -> checkpoint.Checkpoint:
        arrays = dict(ck.arrays)
        if how is None:
            del arrays[name]
        else:
            arrays[name] = how(arrays[name])
        return checkpoint.Checkpoint(ck.meta, arrays)
    return edit


def _nan(a: np.ndarray) -> np.ndarray:
    b = a.copy()
    b[3, 1] = np.nan
    return b


CONTENT_DEFECTS = [
    ("round -5", _tamper_meta("round", -5), "round", "is -5; an integer [0, 5]"),
    ("round past the plan", _tamper_meta("round", 6), "round", "is 6; an integer [0, 5]"),
    ("round not an integer", _tamper_meta("round", "2"), "round", "is '2'; an integer [0, 5]"),
    ("negative env steps", _tamper_meta("env_steps", -512), "env_steps", "is -512; an integer >= 0"),
    ("negative bytes", _tamper_meta("bytes_up", -1), "bytes_up", "is -1; an integer >= 0"),
    ("fractional bytes", _tamper_meta("bytes_down", 0.5), "bytes_down", "is 0.5; an integer >= 0"),
    ("negative wall time", _tamper_meta("wall_time_s", -3.0), "wall_time_s", "is -3.0; seconds >= 0"),
    ("a node that does not exist", _tamper_meta("holds", {"7": 1}), "holds",
     "names node '7'; the federation has nodes 0..1"),
    ("NaN weights", _tamper_array("model0/0", _nan), "model0/0", "holds 1 non-finite values"),
    ("transposed weights", _tamper_array("model0/0", lambda a: a.T.copy()), "model0/0",
     "is float32 of shape (4, 64); float of shape (64, 4) (the model's)"),
    ("a missing layer", _tamper_array("model0/11", None), "model0/11", "is missing"),
]


@pytest.mark.parametrize(("case", "edit", "field", "reason"), CONTENT_DEFECTS, ids=[c[0] for c in CONTENT_DEFECTS])
def test_a_checkpoint_that_does_not_fit_the_config_is_refused_in_one_line(
        tmp_path: Path, case: str, edit: Any, field: str, reason: str) -> None:
    path = _killed_run(tmp_path)
    ck = checkpoint.load(path)
    assert ck is not None
    checkpoint.save(path, edit(ck))
    metrics = (path / METRICS).read_bytes()
    with pytest.raises(RunFileError) as err:
        _resume(tmp_path)
    assert str(err.value) == f"{path / checkpoint.FILE}: {field}: {reason}"
    assert err.value.key == field
    assert (path / METRICS).read_bytes() == metrics  # nothing truncated


def test_observation_statistics_with_a_negative_count_are_refused(tmp_path: Path) -> None:
    path = _killed_run(tmp_path, **{"algo.norm-obs": "on"})
    ck = checkpoint.load(path)
    assert ck is not None
    moments = ck.arrays["moments0"].copy()
    assert moments.shape == (9,)  # count, 4 means, 4 second moments
    moments[0] = -100.0
    checkpoint.save(path, checkpoint.Checkpoint(ck.meta, {**ck.arrays, "moments0": moments}))
    with pytest.raises(RunFileError, match=r"checkpoint\.npz: moments0: has a negative count or second moment$"):
        _resume(tmp_path, **{"algo.norm-obs": "on"})


def test_the_untampered_checkpoint_resumes(tmp_path: Path) -> None:
    _killed_run(tmp_path)
    fed = _resume(tmp_path)
    assert (fed.round, fed.counters.env_steps, fed.counters.bytes_up, fed.counters.bytes_down) == (2, 1024, 2000, 4000)
    np.testing.assert_array_equal(fed.models[0][0], _fed(tmp_path).models[0][0] + np.float32(0.25))


def _truncated(raw: bytes) -> bytes:
    return raw[: len(raw) * 2 // 3]


def _flipped(raw: bytes) -> bytes:
    b = bytearray(raw)
    for i in range(len(b) // 4, len(b) // 2, 97):  # inside the arrays' data: the zip CRC catches it
        b[i] ^= 0x5A
    return bytes(b)


@pytest.mark.parametrize("damage", [_truncated, _flipped, lambda raw: b"", lambda raw: b"PK\x03\x04" + raw[4:40]],
                         ids=["truncated", "bit-flipped", "empty", "a torn header"])
def test_a_torn_or_bit_flipped_checkpoint_is_one_line_naming_the_file(tmp_path: Path, damage: Any) -> None:
    path = _killed_run(tmp_path)
    raw = (path / checkpoint.FILE).read_bytes()
    (path / checkpoint.FILE).write_bytes(damage(raw))
    metrics = (path / METRICS).read_bytes()
    with pytest.raises(RunFileError) as err:
        _resume(tmp_path)
    line = str(err.value)
    assert line.startswith(f"{path / checkpoint.FILE}: file: not a readable checkpoint (") and "\n" not in line
    assert (path / METRICS).read_bytes() == metrics


def test_every_single_byte_flip_is_refused_or_harmless(tmp_path: Path) -> None:
    """Each byte of a small checkpoint flipped in turn: it loads the same contents, or it is a RunFileError."""
    ck = checkpoint.Checkpoint({"round": 3, "env_steps": 512}, {"model0/0": np.arange(12, dtype=np.float32).reshape(3, 4),
                                                                 "serveropt/steps": np.array([2], np.int64)})
    checkpoint.save(tmp_path, ck)
    raw = (tmp_path / checkpoint.FILE).read_bytes()
    refused = 0
    for i in range(len(raw)):
        b = bytearray(raw)
        b[i] ^= 0xFF
        (tmp_path / checkpoint.FILE).write_bytes(bytes(b))
        try:
            back = checkpoint.load(tmp_path)
        except RunFileError as err:
            assert err.key in ("file", "meta")
            refused += 1
            continue
        assert back is not None and back.meta == ck.meta and back.arrays.keys() == ck.arrays.keys()
        for k, a in ck.arrays.items():
            np.testing.assert_array_equal(back.arrays[k], a)
    assert refused > len(raw) // 2  # not vacuous: most flips land in checked bytes


def test_meta_that_is_not_a_json_object_is_refused_naming_meta(tmp_path: Path) -> None:
    with open(tmp_path / checkpoint.FILE, "wb") as fh:
        np.savez(fh, meta=np.array(json.dumps([1, 2])))
    with pytest.raises(RunFileError) as err:
        checkpoint.load(tmp_path)
    assert str(err.value) == f"{tmp_path / checkpoint.FILE}: meta: not one JSON object (the checkpoint's metadata)"


def test_fedrl_central_reports_a_checkpoint_that_does_not_fit_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fedrl.cli import main

    path = _killed_run(tmp_path)
    ck = checkpoint.load(path)
    assert ck is not None
    checkpoint.save(path, _tamper_meta("round", -5)(ck))
    overrides = " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in SMALL.items())
    app = str(Path(__file__).resolve().parents[2])
    rc = main(["central", app, "--run-config", f"{overrides} output-dir='{tmp_path}' resume='true'"])
    out, err = capsys.readouterr()
    assert (rc, err) == (2, f"fedrl central: {path / checkpoint.FILE}: round: is -5; an integer [0, 5]\n")
    assert "Traceback" not in out
