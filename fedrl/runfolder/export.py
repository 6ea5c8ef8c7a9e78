"""``fedrl export RUN_DIR [--which best|final]``: the run's best (default) or final policy as a file
that runs without fedrl. ``best`` is ``best_model.npz``, the model of the best evaluation
(``fedrl.runfolder.best``); ``final`` is ``model.npz``, the model the run ended with.

The exported module takes a float32 batch of raw observations ``[B, obs_dim]`` and returns the
greedy action the framework's evaluation takes (the model's ``greedy`` after the run's
observation normalization): int64 indices for discrete actions, the Gaussian mean for
continuous ones (clip it to your env's bounds, as ``run_policy.py`` and fedrl's evaluation do).
Normalization statistics are baked in as buffers.

Formats: ``torchscript`` (``policy.pt``, ``torch.jit.load``; TorchScript is deprecated in torch
2.13 but still loads everywhere torch does) and ``onnx`` (``policy.onnx``; needs the ``onnx``
package, which fedrl does not install: the command says so and exits 2). Next to the policy go
``policy.json`` (env id, kwargs, spaces) and ``run_policy.py``, a standalone example that plays
episodes in the Gymnasium env with only torch (or onnxruntime) and gymnasium installed.
"""

from __future__ import annotations

import importlib.util
import io
import json
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from fedrl.errors import ConfigError
from fedrl.model.moments import Moments
from fedrl.rl.networks import ActorCritic, PolicySpec, mirrored, set_weights
from fedrl.runfolder.final_model import read_final_model
from fedrl.storage.atomic import PUBLIC, write_bytes, write_text

FORMATS = ("torchscript", "onnx")


class GreedyPolicy(nn.Module):
    """Raw observations -> greedy actions (normalization, then the model's ``greedy``: the actor's
    argmax or mean for PPO, argmax Q for DQN)."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, model: nn.Module, spec: PolicySpec, moments: Moments | None, clip: float = 10.0,
                 eps: float = 1e-8) -> None:
        super().__init__()
        # PPO's actor alone (the critic plays no part in acting; the exported weights keep its
        # "actor." names), any other model whole, acting through its greedy()
        self.actor: nn.Module | None = model.actor if isinstance(model, ActorCritic) else None
        self.model: nn.Module | None = None if isinstance(model, ActorCritic) else model
        self.discrete = spec.action_kind == "discrete"
        self.spec = spec  # algo.mirror: the actor is made symmetric as in training (networks.mirrored)
        d = spec.obs_dim
        on = moments is not None and moments.count > 0
        mean = moments.mean if on and moments is not None else np.zeros(d)
        std = np.sqrt(moments.var + eps) if on and moments is not None else np.ones(d)
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float64))
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float64))
        self.clip = clip

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # float64 as numpy's normalize computes it, then float32 into the network
        x = torch.clamp((obs.to(torch.float64) - self.mean) / self.std, -self.clip, self.clip).to(torch.float32)
        if self.model is not None:
            return self.model.greedy(x)  # type: ignore[no-any-return,operator]
        assert self.actor is not None
        out = mirrored(self.actor, x, self.spec, action=True)
        return out.argmax(-1) if self.discrete else out


def load_policy(run_dir: Path, which: str = "best") -> tuple[GreedyPolicy, dict[str, object]]:
    """The run's ``which`` policy (``best``: best_model.npz, ``final``: model.npz) and its
    description (from config.json; ``which`` included).

    Raises:
        ConfigError: ``RUN_DIR`` when ``run_dir`` is not a folder; ``RunFileError`` (a
            ``ConfigError``) naming the file and field when a file is missing or does not fit
            (``fedrl.runfolder.final_model``). A policy with non-finite weights is refused, never exported.
    """
    final = read_final_model(run_dir, which)
    model = final.make_model(final.spec)
    set_weights(model, final.weights)
    spec = final.spec
    info: dict[str, object] = {"env_id": final.env_id, "env_kwargs": final.env_kwargs, "obs_dim": spec.obs_dim,
                               "action_kind": spec.action_kind, "action_dim": spec.action_dim,
                               "normalized_observations": final.moments is not None, "which": which}
    return GreedyPolicy(model, spec, final.moments).eval(), info


def export(run_dir: Path, fmt: str = "torchscript", out: Path | None = None, which: str = "best") -> Path:
    """Write the policy, ``policy.json`` and ``run_policy.py`` into ``out`` (default RUN_DIR/export).

    Each file is written atomically (``fedrl.storage.atomic``): a reader sees the old file or the new one.

    Raises:
        ConfigError: ``--format`` for an unknown or unavailable format, ``--out`` when the folder
            cannot be created or written, and whatever ``load_policy`` raises; nothing is written then.
    """
    if fmt not in FORMATS:
        raise ConfigError("--format", f"got {fmt!r}; one of {', '.join(FORMATS)}")
    if fmt == "onnx" and importlib.util.find_spec("onnx") is None:
        raise ConfigError("--format", "onnx export needs the onnx package (pip install onnx onnxscript); it is not "
                                      "installed here. --format torchscript needs nothing more than torch")
    policy, info = load_policy(run_dir, which)
    out = out or run_dir / "export"
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"{out} exists and is not a folder; give a folder (it is created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        example = torch.zeros(1, int(info["obs_dim"]))  # type: ignore[call-overload]
        info["file"], data = _serialize(policy, example, fmt)
        info["format"] = fmt
        write_bytes(out / str(info["file"]), data, PUBLIC)
        write_text(out / "policy.json", json.dumps(info, indent=1))
        write_text(out / "run_policy.py", _EXAMPLE)
    except OSError as err:
        raise ConfigError("--out", f"cannot write to {out}: {err.strerror or err}") from None
    return out


def _serialize(policy: GreedyPolicy, example: torch.Tensor, fmt: str) -> tuple[str, bytes]:
    """(file name, bytes) of the exported policy."""
    if fmt == "torchscript":
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates TorchScript; it still works
            torch.jit.save(torch.jit.trace(policy, example), buf)
        return "policy.pt", buf.getvalue()
    with tempfile.TemporaryDirectory() as tmp:  # the ONNX exporter wants a path; the output is written atomically
        path = Path(tmp) / "policy.onnx"
        torch.onnx.export(policy, (example,), str(path), input_names=["obs"], output_names=["action"],
                          dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"}})
        return "policy.onnx", path.read_bytes()


_EXAMPLE = '''"""Play the exported fedrl policy in its Gymnasium env; needs torch (or onnxruntime) and gymnasium only.

    python run_policy.py [--episodes 5] [--seed 0]
"""

import argparse
import json
from pathlib import Path

import gymnasium as gym
import numpy as np

here = Path(__file__).resolve().parent
info = json.loads((here / "policy.json").read_text())
ap = argparse.ArgumentParser()
ap.add_argument("--episodes", type=int, default=5)
ap.add_argument("--seed", type=int, default=0)
args = ap.parse_args()

if info["format"] == "torchscript":
    import torch

    policy = torch.jit.load(str(here / info["file"]))

    def act(obs):
        with torch.no_grad():
            return policy(torch.as_tensor(obs, dtype=torch.float32)[None]).numpy()[0]
else:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(here / info["file"]))

    def act(obs):
        return session.run(None, {"obs": np.asarray(obs, np.float32)[None]})[0][0]

kwargs = {}
for item in filter(None, (s.strip() for s in info["env_kwargs"].split(";"))):
    key, value = (s.strip() for s in item.split("=", 1))
    kwargs[key] = {"true": True, "false": False}.get(value.lower(), value)
    for cast in (int, float):
        try:
            kwargs[key] = cast(value)
            break
        except ValueError:
            pass
env = gym.make(info["env_id"], **kwargs)
for episode in range(args.episodes):
    obs, _ = env.reset(seed=args.seed + episode)
    total, done = 0.0, False
    while not done:
        a = act(obs)
        if info["action_kind"] == "continuous":
            a = np.clip(a, env.action_space.low, env.action_space.high)
        obs, reward, terminated, truncated, _ = env.step(a if info["action_kind"] == "continuous" else int(a))
        total += float(reward)
        done = terminated or truncated
    print(f"episode {episode}: return {total:.1f}")
'''
