"""The best model by evaluation (issue 13): kept in best_model.npz, restored on resume, exported by
``--which``; ``last_evals_min_return`` and the final table's word on it.

The federation's evaluations are chosen by the test (``Scripted``: returns per round from a script)
and each round's model is a constant equal to the round, so which round a file holds is read off its
weights. Everything else is the real run-folder code (``end_round``, ``finish``, the checkpoint).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedrl.cli import main
from fedrl.config import from_run_config
from fedrl.runfolder.best import Best
from fedrl.runfolder.results import BEST_MODEL, METRICS, MODEL, RunFolder
from fedrl.server.centralized import run_centralized
from fedrl.server.federation import Federation
from fedrl.server.rundir import end_round, finish, resolve_run_folder
from fedrl.server.snapshot import best_of
from fedrl.storage import checkpoint

# Pinned: these tests check exact aggregation formulas on replies without observation statistics
# (the defaults turn normalization on and anneal the server step, issue 13).
SMALL = {"nodes.count": 2, "algo.local-steps": 256, "eval.episodes": 1, "num-server-rounds": 6, "run-name": "r", "algo.norm-obs": "off", "strategy.server-lr-end": -1}
# per round: the two variants' returns. 3 ties 2 on the worst variant and wins on the mean; 4 equals
# 3 (not strictly better: the earlier round stays); 5 has the best mean but a worse worst variant.
SCRIPT = {1: [10.0, 30.0], 2: [50.0, 50.0], 3: [50.0, 60.0], 4: [60.0, 50.0], 5: [40.0, 500.0], 6: [20.0, 20.0]}


class Scripted(Federation):
    """A Federation whose evaluation of round r returns ``script[r]`` (no episodes are played)."""

    def __init__(self, cfg: Any, script: dict[int, list[float]]) -> None:
        super().__init__(cfg)
        self.script = script
        self.evaluated: list[int] = []

    def evaluate_own(self) -> list[float]:
        self.evaluated.append(self.round)
        return list(self.script[self.round])


def _fed(tmp_path: Path, script: dict[int, list[float]] = SCRIPT, **over: object) -> Scripted:
    return Scripted(from_run_config({**SMALL, "output-dir": str(tmp_path), **over}), script)


def _play(fed: Scripted, folder: RunFolder, rounds: range) -> None:
    """Rounds as a run ends them; round r's model (every slot) is the constant r."""
    for rnd in rounds:
        fed.round = rnd
        fed.rule.models = [[np.full(w.shape, rnd, np.float32) for w in m] for m in fed.models]
        assert not end_round(fed, folder, time.time(), time.time(), {})


def _round_of(path: Path, prefix: str = "policy/") -> float:
    """The constant every array under ``prefix`` of the model file holds (the round it was saved in)."""
    with np.load(path, allow_pickle=False) as z:
        values = {float(v) for k in z.files if k.startswith(prefix) for v in np.unique(z[k])}
    assert len(values) == 1, values
    return values.pop()


def test_the_best_evaluation_is_kept_in_best_model_npz_and_summary(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    fed = _fed(tmp_path)
    folder = resolve_run_folder(fed)
    _play(fed, folder, range(1, 7))
    summary = finish(fed, folder)
    assert fed.evaluated == [1, 2, 3, 4, 5, 6]  # finish reuses round 6's evaluation
    assert (summary["best_round"], summary["best_eval_min_return"], summary["best_eval_mean_return"]) == (3, 50.0, 55.0)
    assert summary["last_evals_min_return"] == 20.0  # rounds 2..6
    assert summary["eval_min_return"] == 20.0 and summary["rounds_completed"] == 6
    on_disk = json.loads((folder.path / "summary.json").read_text())
    assert {k: on_disk[k] for k in ("best_round", "best_eval_min_return", "best_eval_mean_return",
                                    "last_evals_min_return")} == {"best_round": 3, "best_eval_min_return": 50.0,
                                                                  "best_eval_mean_return": 55.0,
                                                                  "last_evals_min_return": 20.0}
    assert _round_of(folder.path / BEST_MODEL) == 3.0
    assert _round_of(folder.path / MODEL) == 6.0
    with np.load(folder.path / BEST_MODEL) as best, np.load(folder.path / MODEL) as final:
        assert best.files == final.files  # the same format
        assert all(best[k].dtype == final[k].dtype == np.float32 for k in best.files if k.startswith("policy/"))
    assert capsys.readouterr().out.splitlines()[-1] == ("best model: round 3, min 50.0 / mean 55.0 (final: min 20.0); "
                                                        "fedrl export uses best by default")


def test_the_final_evaluation_of_a_run_that_stopped_early_counts(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # eval.every 2: rounds 2 and 4 evaluate; the run stops after round 5, which finish evaluates
    script = {2: [50.0, 50.0], 4: [30.0, 90.0], 5: [60.0, 60.0]}
    fed = _fed(tmp_path, script, **{"eval.every": 2})
    folder = resolve_run_folder(fed)
    _play(fed, folder, range(1, 6))
    assert _round_of(folder.path / BEST_MODEL) == 2.0
    summary = finish(fed, folder)
    assert fed.evaluated == [2, 4, 5]
    assert (summary["best_round"], summary["best_eval_min_return"], summary["eval_min_return"]) == (5, 60.0, 60.0)
    assert summary["last_evals_min_return"] == 30.0  # rounds 2, 4 and the final evaluation
    assert _round_of(folder.path / BEST_MODEL) == _round_of(folder.path / MODEL) == 5.0
    assert capsys.readouterr().out.splitlines()[-1] == "final model = best (round 5)"


def test_a_resumed_run_keeps_its_best(tmp_path: Path) -> None:
    fed = _fed(tmp_path)
    folder = resolve_run_folder(fed)
    _play(fed, folder, range(1, 5))  # killed after round 4: the best is round 3
    assert best_of(checkpoint.load(folder.path)) == Best(3, 50.0, 55.0)  # type: ignore[arg-type]
    saved = (folder.path / BEST_MODEL).read_bytes()
    again = _fed(tmp_path, resume="true")
    folder = resolve_run_folder(again)
    assert again.round == 4 and folder.best == Best(3, 50.0, 55.0)
    _play(again, folder, range(5, 7))  # worse than round 3: best_model.npz is not touched
    summary = finish(again, folder)
    assert (folder.path / BEST_MODEL).read_bytes() == saved
    assert (summary["best_round"], summary["best_eval_mean_return"], summary["last_evals_min_return"]) == (3, 55.0, 20.0)
    assert [r["round"] for r in folder.read_metrics()] == [1, 2, 3, 4, 5, 6]


def test_a_resumed_run_replaces_its_best_with_a_better_evaluation(tmp_path: Path) -> None:
    fed = _fed(tmp_path)
    folder = resolve_run_folder(fed)
    _play(fed, folder, range(1, 5))
    again = _fed(tmp_path, {**SCRIPT, 5: [70.0, 70.0]}, resume="true")
    folder = resolve_run_folder(again)
    _play(again, folder, range(5, 7))
    assert folder.best == Best(5, 70.0, 70.0) and _round_of(folder.path / BEST_MODEL) == 5.0
    assert best_of(checkpoint.load(folder.path)) == Best(5, 70.0, 70.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(("best", "why"), [
    ({"round": 5, "min_return": 1.0, "mean_return": 2.0}, "[0, 4]"),  # after the checkpoint's round
    ({"round": 2, "min_return": 3.0, "mean_return": 2.0}, "min_return <= mean_return"),
    ({"round": 2, "min_return": 1.0}, "an object"),
    ("round 2", "an object"),
])
def test_a_malformed_best_in_the_checkpoint_is_refused_naming_it(tmp_path: Path, best: object, why: str) -> None:
    fed = _fed(tmp_path)
    folder = resolve_run_folder(fed)
    _play(fed, folder, range(1, 5))
    ck = checkpoint.load(folder.path)
    assert ck is not None
    checkpoint.save(folder.path, checkpoint.Checkpoint({**ck.meta, "best": best}, ck.arrays))
    rows = (folder.path / METRICS).read_text()
    again = _fed(tmp_path, resume="true")
    with pytest.raises(ValueError) as err:
        resolve_run_folder(again)
    assert str(err.value).startswith(f"{folder.path / checkpoint.FILE}: best: is ") and why in str(err.value)
    assert (folder.path / METRICS).read_text() == rows  # refused before metrics are touched
    assert again.round == 0  # and before anything is restored (snapshot_checks.check_fits)


@pytest.mark.parametrize("mode", [{"strategy.name": "local"}, {"topology.name": "gossip"}])
def test_per_node_runs_keep_the_best_round_of_every_nodes_model(mode: dict[str, str], tmp_path: Path) -> None:
    # per node, evaluation i is node i's model on its own variant; the best round is the best worst node
    script = {1: [10.0, 90.0], 2: [40.0, 45.0], 3: [30.0, 100.0]}
    fed = _fed(tmp_path, script, **mode, **{"num-server-rounds": 3})
    folder = resolve_run_folder(fed)
    _play(fed, folder, range(1, 4))
    summary = finish(fed, folder)
    assert (summary["best_round"], summary["best_eval_min_return"], summary["best_eval_mean_return"]) == (2, 40.0, 42.5)
    for prefix in ("policy/", "node0/", "node1/"):
        assert _round_of(folder.path / BEST_MODEL, prefix) == 2.0
        assert _round_of(folder.path / MODEL, prefix) == 3.0


def test_last_evals_min_return_from_a_constructed_metrics_file(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [{"round": 1, "eval_returns": [0.0, 0.0]}, {"round": 2}, {"round": 3, "eval_returns": [100.0, 7.5]},
            {"round": 4, "eval_returns": [200.0, 300.0]}, {"round": 5}, {"round": 6, "eval_returns": [150.0, 160.0]},
            {"round": 7, "eval_returns": [400.0, 401.0]}, {"round": 8, "eval_returns": [500.0, 450.0]}]
    folder = RunFolder(tmp_path / "r")
    (folder.path / METRICS).write_text("".join(json.dumps({**r, "env_steps": 512 * r["round"]}) + "\n" for r in rows))
    fed = _fed(tmp_path, {}, **{"num-server-rounds": 8})
    fed.round = 8
    summary = finish(fed, folder)
    assert fed.evaluated == []  # round 8's evaluation is in the file
    assert summary["last_evals_min_return"] == 7.5  # rounds 3, 4, 6, 7, 8; round 1's 0 is older
    assert summary["eval_min_return"] == 450.0


def _exported_actor(run: Path, which: str) -> dict[str, np.ndarray]:
    out = run / f"export-{which}"
    assert main(["export", str(run), "--which", which, "--out", str(out)]) == 0
    sd = torch.jit.load(str(out / "policy.pt")).state_dict()
    assert json.loads((out / "policy.json").read_text())["which"] == which
    return {k: v.numpy() for k, v in sd.items() if k.startswith("actor.")}


def test_export_which_exports_the_best_or_the_final_model(tmp_path: Path) -> None:
    fed = _fed(tmp_path)
    folder = resolve_run_folder(fed)
    _play(fed, folder, range(1, 7))
    finish(fed, folder)
    for which, file in (("best", BEST_MODEL), ("final", MODEL)):
        actor = _exported_actor(folder.path, which)
        with np.load(folder.path / file) as z:
            assert actor.keys() == {k[len("policy/"):] for k in z.files if k.startswith("policy/actor.")}
            for k, a in actor.items():
                np.testing.assert_array_equal(a, z[f"policy/{k}"])
        assert {float(v) for a in actor.values() for v in np.unique(a)} == {3.0 if which == "best" else 6.0}
    assert main(["export", str(folder.path), "--out", str(tmp_path / "default")]) == 0  # default: best
    assert json.loads((tmp_path / "default" / "policy.json").read_text())["which"] == "best"


def test_fedrl_central_writes_the_best_model(tmp_path: Path) -> None:
    cfg = from_run_config({**SMALL, "num-server-rounds": 2, "output-dir": str(tmp_path), "run-name": "c"})
    run_centralized(cfg)
    run = tmp_path / "c"
    rows = [r for r in RunFolder(run).read_metrics() if r.get("eval_returns")]
    assert [r["round"] for r in rows] == [1, 2]
    ranked = max(rows, key=lambda r: (r["eval_min_return"], r["eval_mean_return"], -r["round"]))
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["best_round"], summary["best_eval_min_return"], summary["best_eval_mean_return"]) == (
        ranked["round"], ranked["eval_min_return"], ranked["eval_mean_return"])
    assert summary["last_evals_min_return"] == min(min(r["eval_returns"]) for r in rows)
    with np.load(run / BEST_MODEL) as best, np.load(run / MODEL) as final:
        assert best.files == final.files
        same = all(np.array_equal(best[k], final[k]) for k in best.files)
    assert same == (summary["best_round"] == 2)
