"""``fedrl export``: the exported policy acts as the framework's, and its example runs without fedrl."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedrl.cli import main
from fedrl.config import from_run_config
from fedrl.experiment import policy_spec, variants_of
from fedrl.model.moments import Moments, normalize
from fedrl.registry.algorithms import get as algorithm
from fedrl.rl.networks import set_weights
from fedrl.runfolder.export import load_policy
from fedrl.server.centralized import run_centralized

RUNS = {
    "cartpole": {"nodes.count": 2, "algo.local-steps": 256, "num-server-rounds": 1, "eval.episodes": 1},
    "pendulum": {"env.id": "Pendulum-v1", "env.vary": "g=linspace(9, 11)", "nodes.count": 2,
                 "algo.local-steps": 256, "num-server-rounds": 1, "eval.episodes": 1},  # normalized observations
    # algo.mirror: the exported actor is made symmetric as in training (uncentred statistics)
    "cartpole-mirror": {"nodes.count": 2, "algo.local-steps": 256, "num-server-rounds": 1, "eval.episodes": 1,
                        "algo.mirror": True, "algo.norm-obs-center": False},
    "pendulum-mirror": {"env.id": "Pendulum-v1", "env.vary": "g=linspace(9, 11)", "nodes.count": 2,
                        "algo.local-steps": 256, "num-server-rounds": 1, "eval.episodes": 1, "algo.mirror": True,
                        "algo.norm-obs-center": False},
    "dqn": {"algo.name": "dqn", "dqn.dueling": True, "dqn.learning-starts": 64, "nodes.count": 2,
            "algo.local-steps": 256, "num-server-rounds": 1, "eval.episodes": 1},  # argmax of a dueling Q network
    # SAC squashes its mean into the env's bounds (Pendulum: +-2), which are not weights
    "sac": {"algo.name": "sac", "env.id": "Pendulum-v1", "env.vary": "g=linspace(9, 11)", "sac.learning-starts": 64,
            "nodes.count": 2, "algo.local-steps": 256, "num-server-rounds": 1, "eval.episodes": 1},
}


def _framework_actions(run: Path, obs: np.ndarray) -> np.ndarray:
    written = json.loads((run / "config.json").read_text())
    resolved = written["policy"]
    cfg = from_run_config({k: v for k, v in written["run_config"].items() if k != "resume"})
    spec = policy_spec(cfg, variants_of(cfg)[0])  # as the server built it to evaluate (bounds included)
    model = algorithm(cfg.algo.name).model_for(cfg)(spec)
    with np.load(run / "best_model.npz") as z:  # what fedrl export exports by default (--which best)
        set_weights(model, [z[f"policy/{n}"] for n in resolved["weight_names"]])
        m = Moments.from_array(z["obs_moments"]) if "obs_moments" in z.files else None
    x = normalize(obs, m) if m is not None else obs.astype(np.float32)
    with torch.inference_mode():
        return model.greedy(torch.as_tensor(x)).numpy()


@pytest.mark.parametrize("env", ["cartpole", "pendulum", "cartpole-mirror", "pendulum-mirror", "dqn", "sac"])
def test_the_exported_policy_chooses_the_frameworks_actions_on_1000_observations(env: str, tmp_path: Path) -> None:
    run_centralized(from_run_config({**RUNS[env], "output-dir": str(tmp_path), "run-name": "r"}))
    run = tmp_path / "r"
    assert main(["export", str(run)]) == 0
    policy = torch.jit.load(str(run / "export" / "policy.pt"))
    info = json.loads((run / "export" / "policy.json").read_text())
    # algo.norm-obs = auto is on for PPO (issue 13), off for the replay learners
    assert info["normalized_observations"] is (env not in ("dqn", "sac"))
    obs = np.random.default_rng(0).normal(0, 2, (1000, info["obs_dim"])).astype(np.float32)
    with torch.no_grad():
        exported = policy(torch.as_tensor(obs)).numpy()
    ours = _framework_actions(run, obs)
    if env.endswith("-mirror"):  # the mirrored observation gets the mirrored action
        mirror = json.loads((run / "config.json").read_text())["policy"]
        with torch.no_grad():
            flipped = policy(torch.as_tensor(obs * np.asarray(mirror["obs_mirror"], np.float32))).numpy()
        if info["action_kind"] == "discrete":
            np.testing.assert_array_equal(flipped, np.asarray(mirror["action_mirror"])[exported])
        else:
            np.testing.assert_allclose(flipped, -exported, rtol=1e-5, atol=1e-6)
    if env not in ("pendulum", "pendulum-mirror", "sac"):
        np.testing.assert_array_equal(exported, ours)
        assert 0 < ours.mean() < 1  # both actions occur: the comparison is not vacuous
    else:
        np.testing.assert_allclose(exported, ours, rtol=1e-6, atol=1e-6)
    if env == "sac":
        assert np.abs(ours).max() > 1  # torques beyond the default bounds of 1 occur: the bounds travelled
    # the example plays the env with torch and gymnasium only: importing fedrl fails inside it
    script = f"import runpy, sys; sys.modules['fedrl'] = None; sys.argv = ['run_policy.py', '--episodes', '2']; " \
             f"runpy.run_path({str(run / 'export' / 'run_policy.py')!r}, run_name='__main__')"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.count("return") == 2, out.stderr[-2000:]


def test_export_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    assert main(["export", str(tmp_path)]) == 2  # not a run folder
    run_centralized(from_run_config({**RUNS["cartpole"], "output-dir": str(tmp_path), "run-name": "r"}))
    onnx_missing = __import__("importlib.util").util.find_spec("onnx") is None
    assert main(["export", str(tmp_path / "r"), "--format", "onnx"]) == (2 if onnx_missing else 0)
    assert load_policy(tmp_path / "r")[1]["env_id"] == "CartPole-v1"


def test_a_folder_from_before_the_log_std_layer_still_exports(tmp_path: Path) -> None:
    """Run folders written before the Gaussian log-std became a layer name its weight ``log_std``
    (now ``std.log_std``); export reads them and acts as on the renamed folder."""
    run_centralized(from_run_config({**RUNS["pendulum"], "output-dir": str(tmp_path), "run-name": "r"}))
    run = tmp_path / "r"
    assert main(["export", str(run)]) == 0
    obs = np.random.default_rng(0).normal(0, 2, (100, 3)).astype(np.float32)
    with torch.no_grad():
        new = torch.jit.load(str(run / "export" / "policy.pt"))(torch.as_tensor(obs)).numpy()
    written = json.loads((run / "config.json").read_text())
    assert written["policy"]["weight_names"][0] == "std.log_std"
    written["policy"]["weight_names"][0] = "log_std"
    (run / "config.json").write_text(json.dumps(written))
    for name in ("model.npz", "best_model.npz"):
        with np.load(run / name) as z:
            arrays = {("policy/log_std" if k == "policy/std.log_std" else k): z[k] for k in z.files}
        assert "policy/log_std" in arrays
        np.savez(run / name, **arrays)
    assert main(["export", str(run), "--out", str(tmp_path / "old")]) == 0
    with torch.no_grad():
        old = torch.jit.load(str(tmp_path / "old" / "policy.pt"))(torch.as_tensor(obs)).numpy()
    np.testing.assert_array_equal(old, new)
