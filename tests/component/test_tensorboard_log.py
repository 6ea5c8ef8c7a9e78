"""``log.tensorboard``: a real run's event files, read back with TensorBoard's own reader, hold
exactly the metrics.jsonl values, against rounds and against env steps; a resumed run's curves
hold each round once; the ClientApp never imports TensorBoard."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fedrl.config import from_run_config
from fedrl.runfolder.results import METRICS
from fedrl.runfolder.tensorboard_log import BY_ENV_STEPS, FOLDER, scalars
from fedrl.server.centralized import run_centralized
from fedrl.server.federation import Federation
from fedrl.server.rundir import end_round, finish, resolve_run_folder

SMALL = {"nodes.count": 2, "algo.local-steps": 256, "eval.episodes": 1, "num-server-rounds": 3, "run-name": "tb",
         "log.tensorboard": True}


def _read(folder: Path) -> EventAccumulator:
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    return acc


def _series(acc: EventAccumulator, tag: str) -> dict[int, float]:
    return {e.step: e.value for e in acc.Scalars(tag)}


def test_a_runs_event_files_hold_its_metrics_rows(tmp_path: Path) -> None:
    run_centralized(from_run_config({**SMALL, "output-dir": str(tmp_path)}))
    run = tmp_path / "tb"
    rows = [json.loads(line) for line in (run / METRICS).read_text().splitlines()]
    by_round, by_steps = _read(run / FOLDER), _read(run / FOLDER / BY_ENV_STEPS)
    assert len(rows) == 3 and "eval_returns/1" in by_round.Tags()["scalars"]
    expected_tags = set().union(*(scalars(r) for r in rows))
    assert set(by_round.Tags()["scalars"]) == expected_tags == set(by_steps.Tags()["scalars"])
    for r in rows:
        for tag, value in scalars(r).items():
            assert _series(by_round, tag)[r["round"]] == pytest.approx(value, rel=1e-6), tag
            assert _series(by_steps, tag)[r["env_steps"]] == pytest.approx(value, rel=1e-6), tag
    assert "_hparams_/experiment" in by_round.summary_metadata  # the config, as TensorBoard's hparams


def test_a_resumed_run_purges_what_the_killed_one_wrote_after_its_checkpoint(tmp_path: Path) -> None:
    cfg = from_run_config({**SMALL, "output-dir": str(tmp_path), "eval.every": 0, "num-server-rounds": 4})
    fed = Federation(cfg)
    folder = resolve_run_folder(fed)
    run = folder.path
    for rnd in (1, 2, 3):
        fed.completed(rnd)
        fed.counters.trained(100)
        end_round(fed, folder, time.time(), time.time(), {})
        if rnd == 2:
            shutil.copy(run / "checkpoint.npz", tmp_path / "after2.npz")
    folder.close()
    # killed after round 3's row reached metrics.jsonl and TensorBoard, before its checkpoint landed
    shutil.copy(tmp_path / "after2.npz", run / "checkpoint.npz")
    time.sleep(1.1)  # a new event file name (TensorBoard orders files by their time stamp)
    again = Federation(from_run_config({**SMALL, "output-dir": str(tmp_path), "eval.every": 0,
                                        "num-server-rounds": 4, "resume": "true"}))
    folder = resolve_run_folder(again)
    assert again.round == 2
    for rnd in (3, 4):
        again.completed(rnd)
        again.counters.trained(150)
        end_round(again, folder, time.time(), time.time(), {})
    finish(again, folder)
    rows = [json.loads(line) for line in (run / METRICS).read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    for acc, x in ((_read(run / FOLDER), "round"), (_read(run / FOLDER / BY_ENV_STEPS), "env_steps")):
        events = [(e.step, e.value) for e in acc.Scalars("env_steps")]
        assert events == [(r[x], float(r["env_steps"])) for r in rows]  # round 3 once: the resumed run's 350


def test_the_client_app_never_imports_tensorboard() -> None:
    code = ("import sys; import client_app; from fedrl.flower import client, clientapp; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorboard', 'fedrl') and "
            "(m.startswith('tensorboard') or m == 'fedrl.runfolder.tensorboard_log')); print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"
