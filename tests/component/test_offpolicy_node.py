"""DQN on the algorithm interface (issue 17): a node's round through the real ClientApp handler
keeps its replay buffer in its state (and on disk with ``state-dir``, across a SuperNode
restart) and sends only its Q network; the server averages Q networks as any weights; settings
DQN cannot run are refused by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from fedrl.checks.validate import check, validate
from fedrl.config import DEFAULTS, from_run_config
from fedrl.errors import ConfigError
from fedrl.flower import codec
from fedrl.flower.client import handle_train
from fedrl.server.federation import Federation
from fedrl.wire import Reply


@pytest.fixture(autouse=True)
def _task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower stamps new messages with the running task's identity; here the test is the task."""
    for attr, value in (("_run_id", 5), ("_node_id", 1), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)


RUN_CONFIG = {**DEFAULTS, "algo.name": "dqn", "nodes.count": 2, "algo.local-steps": 256, "num-server-rounds": 3,
              "dqn.learning-starts": 64, "dqn.buffer-size": 600, "algo.hidden": "32,32"}


def _round(fed: Federation, rnd: int, state_dir: Path, state: RecordDict) -> tuple[int, float, int]:
    """Node 0 trains round ``rnd`` on a SuperNode whose memory is ``state``: the transitions in its
    replay buffer after the round, its optimizer steps so far, and the bytes of its reply."""
    ctx = Context(run_id=5, node_id=9, node_config={"partition-id": 0, "num-partitions": 2,
                                                   "state-dir": str(state_dir)}, state=state, run_config=RUN_CONFIG)
    msg = Message(codec.encode_plan(*fed.plan(0, rnd)), dst_node_id=9, message_type=codec.TRAIN)
    reply = handle_train(msg, ctx).content
    replay = codec.load_node_state(state, 0).arrays["replay.reward"]
    return len(replay), codec.decode_reply(reply).metrics["optimizer_steps"], codec.content_bytes(reply)


def test_the_replay_buffer_stays_on_the_node_and_survives_a_restart(tmp_path: Path) -> None:
    fed = Federation(from_run_config(RUN_CONFIG))
    weight_bytes = sum(w.nbytes for w in fed.models[0])
    size, steps1, sent = _round(fed, 1, tmp_path, RecordDict())
    # 256 env steps: 256 transitions (3-step windows still open at the end of the round bootstrap early)
    assert size == 256 and steps1 > 0
    assert sent < weight_bytes + 4096  # the Q network and a few metrics: no transitions on the wire
    size, steps2, _ = _round(fed, 2, tmp_path, RecordDict())  # a restarted SuperNode: only its state file remains
    assert size == 512 and steps2 > steps1 * 1.5  # the buffer and Adam's step count carried over
    size, _, _ = _round(fed, 3, tmp_path, RecordDict())
    assert size == 600  # bounded by dqn.buffer-size


def test_fedavg_of_q_networks_on_constructed_replies() -> None:
    fed = Federation(from_run_config({**RUN_CONFIG, "dqn.dueling": True, "algo.norm-obs": "off",
                                      "strategy.server-lr": 1.0, "strategy.server-lr-end": -1}))
    assert fed.names == ["trunk.0.weight", "trunk.0.bias", "trunk.2.weight", "trunk.2.bias", "head.weight",
                         "head.bias", "value.weight", "value.bias"]
    g = [w.copy() for w in fed.models[0]]
    fed.aggregate([Reply(0, [w + np.float32(1.0) for w in g], 100, None, {}),
                   Reply(1, [w - np.float32(2.0) for w in g], 300, None, {})])
    for new, old in zip(fed.models[0], g, strict=True):  # (100 * 1 + 300 * -2) / 400 = -1.25
        np.testing.assert_allclose(new - old, -1.25, atol=1e-6)


def test_settings_dqn_cannot_run_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="algo.name.*discrete"):
        validate(from_run_config({**RUN_CONFIG, "env.id": "Pendulum-v1", "env.vary": "g=linspace(9, 11)"}))
    with pytest.raises(ConfigError, match="algo.norm-reward"):
        validate(from_run_config({**RUN_CONFIG, "algo.norm-reward": "on"}))
    with pytest.raises(ConfigError, match="dqn.batch-size"):
        validate(from_run_config({**RUN_CONFIG, "dqn.batch-size": 700}))
    with pytest.raises(ConfigError, match="algo.local-steps"):
        validate(from_run_config({**RUN_CONFIG, "algo.local-steps": 250}))


def test_sac_refuses_discrete_actions_and_both_refuse_dpsgd_with_the_reason() -> None:
    sac = {**DEFAULTS, "algo.name": "sac", "env.id": "Pendulum-v1", "env.vary": "g=linspace(9, 11)", "nodes.count": 2,
           "algo.local-steps": 256}
    validate(from_run_config(sac))
    with pytest.raises(ConfigError, match="algo.name.*continuous"):
        validate(from_run_config({**sac, "env.id": "CartPole-v1", "env.vary": "length=linspace(0.4, 1.2)"}))
    for rc in (sac, RUN_CONFIG):  # fedrl check: the whole pre-flight a run goes through
        with pytest.raises(ConfigError, match="privacy.dpsgd.*algo.name = (sac|dqn).*reuses transitions.*docs/privacy.md"):
            check({**rc, "privacy.dpsgd": True, "algo.norm-obs": "off"})


def test_a_sac_node_round_keeps_its_temperature_and_buffer_and_sends_actor_and_critics(tmp_path: Path) -> None:
    rc = {**DEFAULTS, "algo.name": "sac", "env.id": "Pendulum-v1", "env.vary": "g=linspace(9, 11)", "nodes.count": 2,
          "algo.local-steps": 256, "sac.learning-starts": 64, "sac.batch-size": 32, "algo.hidden": "16"}
    fed = Federation(from_run_config(rc))
    assert [n.split(".")[0] for n in fed.names] == ["actor"] * 4 + ["q1"] * 4 + ["q2"] * 4
    state = RecordDict()
    ctx = Context(run_id=5, node_id=9, node_config={"partition-id": 0, "num-partitions": 2}, state=state,
                  run_config=rc)
    msg = Message(codec.encode_plan(*fed.plan(0, 1)), dst_node_id=9, message_type=codec.TRAIN)
    reply = codec.decode_reply(handle_train(msg, ctx).content)
    kept = codec.load_node_state(state, 0).arrays
    assert len(kept["replay.reward"]) == 256 and kept["sac.env_steps"][0] == 256
    assert kept["sac.log_alpha"][0] < 0  # tuned down from log(1) in 24 gradient steps
    assert [w.shape for w in reply.weights] == [w.shape for w in fed.models[0]]
    assert any(not np.array_equal(a, b) for a, b in zip(reply.weights, fed.models[0], strict=True))


@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_fedprox_keeps_a_replay_learner_near_the_weights_it_received(algo: str) -> None:
    base = {**DEFAULTS, "nodes.count": 2, "algo.local-steps": 256, "algo.hidden": "16", "strategy.name": "fedprox"}
    rc = {**base, "algo.name": "dqn", "dqn.learning-starts": 64} if algo == "dqn" else {
        **base, "algo.name": "sac", "env.id": "Pendulum-v1", "env.vary": "g=linspace(9, 11)",
        "sac.learning-starts": 64, "sac.batch-size": 32}

    def moved(mu: float) -> float:
        cfg = {**rc, "strategy.proximal-mu": mu}
        fed = Federation(from_run_config(cfg))
        ctx = Context(run_id=5, node_id=9, node_config={"partition-id": 0, "num-partitions": 2}, state=RecordDict(),
                      run_config=cfg)
        msg = Message(codec.encode_plan(*fed.plan(0, 1)), dst_node_id=9, message_type=codec.TRAIN)
        reply = codec.decode_reply(handle_train(msg, ctx).content)
        return float(sum(np.sum((a - b) ** 2) for a, b in zip(reply.weights, fed.models[0], strict=True)))

    assert moved(10.0) < 0.5 * moved(0.0)


def test_training_phases_carry_their_leftover_steps_across_rounds() -> None:
    """dqn.train-freq = 96 with 8 envs and 256 steps a round: 2.67 phases a round, 8 in 3 rounds."""
    rc = {**RUN_CONFIG, "dqn.train-freq": 96, "dqn.gradient-steps": 1, "dqn.learning-starts": 0}
    fed = Federation(from_run_config(rc))
    state = RecordDict()
    steps = []
    for rnd in (1, 2, 3):
        ctx = Context(run_id=5, node_id=9, node_config={"partition-id": 0, "num-partitions": 2}, state=state,
                      run_config=rc)
        msg = Message(codec.encode_plan(*fed.plan(0, rnd)), dst_node_id=9, message_type=codec.TRAIN)
        steps.append(codec.decode_reply(handle_train(msg, ctx).content).metrics["optimizer_steps"])
    assert steps == [2, 5, 8]  # 3 x 256 = 768 = 8 x 96: no phase lost at a round's end


def test_replay_learner_settings_that_cannot_work_are_refused() -> None:
    with pytest.raises(ConfigError, match="dqn.learning-starts.*never start"):
        validate(from_run_config({**RUN_CONFIG, "dqn.learning-starts": 700}))
    fixed = {**DEFAULTS, "algo.name": "sac", "env.id": "Pendulum-v1", "env.vary": "g=linspace(9, 11)",
             "nodes.count": 2, "algo.local-steps": 256, "sac.autotune": False, "sac.alpha": 0.3}
    with pytest.raises(ConfigError, match=r"sac.noise-color.*>= 0"):
        from_run_config({**fixed, "sac.noise-color": -1.0})
    from fedrl.rl.sac import SACModel
    from fedrl.rl.sac_train import _Learner
    from fedrl.wire import NodeState

    fed = Federation(from_run_config(fixed))
    learner = _Learner(SACModel(fed.spec), from_run_config(fixed), NodeState({"sac.log_alpha": np.array([-5.0])}),
                       3, 1)
    assert learner.alpha == pytest.approx(0.3)  # a fixed temperature is sac.alpha, whatever a state holds


def test_sac_refuses_unbounded_actions() -> None:
    from fedrl.registry.algorithms import get as algorithm
    from fedrl.rl.networks import PolicySpec

    cfg = from_run_config({**DEFAULTS, "algo.name": "sac", "env.id": "Pendulum-v1", "env.vary": "g=linspace(9, 11)"})
    make = algorithm("sac").model_for(cfg)
    make(PolicySpec(3, "continuous", 1, (4,), (-2.0,), (2.0,)))
    with pytest.raises(ConfigError, match="env.id.*unbounded"):
        make(PolicySpec(3, "continuous", 1, (4,), (-float("inf"),), (float("inf"),)))



def test_sac_explores_with_colored_noise_when_asked() -> None:
    """sac.noise-color = 2 (red): the warm-up's and the actor's actions follow each other from step
    to step in every env; 0 (white): the warm-up's do not."""

    def lag1(color: float) -> tuple[float, float]:
        rc = {**DEFAULTS, "algo.name": "sac", "env.id": "Pendulum-v1", "env.vary": "g=linspace(9, 11)",
              "nodes.count": 2, "algo.local-steps": 512, "sac.learning-starts": 256, "sac.batch-size": 32,
              "algo.hidden": "16", "sac.noise-color": color}
        fed = Federation(from_run_config(rc))
        state = RecordDict()
        ctx = Context(run_id=5, node_id=9, node_config={"partition-id": 0, "num-partitions": 2}, state=state,
                      run_config=rc)
        msg = Message(codec.encode_plan(*fed.plan(0, 1)), dst_node_id=9, message_type=codec.TRAIN)
        assert all(np.isfinite(w).all() for w in codec.decode_reply(handle_train(msg, ctx).content).weights)
        acts = codec.load_node_state(state, 0).arrays["replay.action"].reshape(64, 8)  # (step, env)
        out = []
        for part in (acts[:32], acts[32:]):  # warm-up, then the actor's samples
            x = part - part.mean(axis=0)
            out.append(float(np.sum(x[1:] * x[:-1]) / np.sum(x * x)))
        return out[0], out[1]

    (white_warm, white_actor), (red_warm, red_actor) = lag1(0.0), lag1(2.0)
    assert abs(white_warm) < 0.25 and red_warm > 0.6
    assert red_actor > 0.6 and red_actor > white_actor + 0.3  # the actor's mean moves with the state too



def test_dqn_lr_end_anneals_the_learning_rate_over_the_run() -> None:
    """dqn.lr-end = 0 over 3 rounds: the last training phase of round 3 (256 steps of 8 envs, a
    phase every 64 env steps: iteration 31 of 32) steps at 1e-3 * (1 - (2 + 31/32) / 3)."""
    from fedrl.envs.batched import make_batched_env
    from fedrl.rl.dqn_train import train_dqn
    from fedrl.wire import LocalPlan, NodeState

    cfg = from_run_config({**RUN_CONFIG, "dqn.lr-end": 0.0})
    fed = Federation(cfg)
    envs = make_batched_env(cfg.env.id, [fed.variants[0]] * cfg.algo.num_envs, {})
    try:
        res = train_dqn(fed.spec, fed.models[0], envs, cfg, LocalPlan(0, 3, 3, 0), NodeState.empty())
    finally:
        envs.close()
    assert res.metrics["lr"] == pytest.approx(1e-3 * (1 - (2 + 31 / 32) / 3), rel=1e-6)
    with pytest.raises(ConfigError, match=r"dqn.lr-end.*-1"):
        from_run_config({**RUN_CONFIG, "dqn.lr-end": -0.5})
