"""DP-SGD in local training: Opacus' per-segment clipping and accounting across rounds, and its checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from opacus.accountants import RDPAccountant

from fedrl.config import from_run_config
from fedrl.envs.make import make_vector_env
from fedrl.errors import ConfigError
from fedrl.federation import initial_weights, policy_spec, variants_of
from fedrl.privacy.dpsgd import module_errors
from fedrl.privacy.plan import sample_plan
from fedrl.rl.networks import ActorCritic, PolicySpec
from fedrl.rl.train import LocalPlan, NodeState, iterations_per_round, train_locally

DPSGD = {"privacy.dpsgd": True, "privacy.dpsgd-noise-multiplier": 1.1, "privacy.dpsgd-clip-norm": 0.5,
         "algo.local-steps": 512, "algo.hidden": "16", "nodes.count": 2}


def test_opacus_handles_the_discrete_policy_and_names_what_it_cannot_handle() -> None:
    assert module_errors(ActorCritic(PolicySpec(4, "discrete", 2, (16,)))) == []
    cont = module_errors(ActorCritic(PolicySpec(3, "continuous", 1, (16,))))
    assert cont and "log_std" in cont[0]
    bn = ActorCritic(PolicySpec(4, "discrete", 2, (16,)))
    bn.critic.append(torch.nn.BatchNorm1d(1))
    assert any("BatchNorm" in e for e in module_errors(bn))
    # the probe leaves the model as it was: no hooks, no gradients
    m = ActorCritic(PolicySpec(4, "discrete", 2, (16,)))
    module_errors(m)
    assert all(not x._forward_hooks and not x._backward_hooks for x in m.modules())
    assert all(p.grad is None for p in m.parameters())


@pytest.mark.parametrize(("over", "key", "words"), [
    ({"ppo.target-kl": 0.02}, "ppo.target-kl", "depend on the data"),
    ({"algo.norm-obs": "on"}, "algo.norm-obs", "running statistics"),
    ({"algo.num-envs": 2}, "algo.num-envs", "less than one segment"),
    ({"env.id": "Pendulum-v1", "env.vary": "g=10.0", "algo.norm-obs": "off", "algo.norm-reward": "off"},
     "privacy.dpsgd", "log_std"),
])
def test_dpsgd_settings_that_cannot_work_fail_before_round_1(over: dict, key: str, words: str) -> None:
    cfg = from_run_config({**DPSGD, **over})
    with pytest.raises(ConfigError) as err:
        sample_plan(cfg, ActorCritic(policy_spec(cfg, variants_of(cfg)[0])))
    assert err.value.key == key and words in str(err.value), str(err.value)


def test_local_training_accounts_every_step_and_the_history_continues_across_rounds() -> None:
    cfg = from_run_config(DPSGD)
    spec = policy_spec(cfg, variants_of(cfg)[0])
    dp = sample_plan(cfg, ActorCritic(spec))
    assert dp is not None and dp.noise_multiplier == 1.1 and dp.clip == 0.5
    envs = make_vector_env(cfg.env.id, [variants_of(cfg)[0]] * cfg.algo.num_envs, {})
    w = initial_weights(spec, 0)
    state = NodeState.empty()
    steps = iterations_per_round(cfg) * cfg.ppo.update_epochs * cfg.ppo.num_minibatches
    try:
        for rnd in (1, 2):
            res = train_locally(spec, w, envs, cfg, LocalPlan(0, rnd, 30, 0), state, dp)
            state, w = res.state, res.weights
            acc = RDPAccountant()
            acc.history = [(1.1, 1 / cfg.ppo.num_minibatches, rnd * steps)]
            assert res.metrics["dpsgd_epsilon"] == pytest.approx(acc.get_epsilon(delta=1e-5), rel=1e-12)
            assert np.asarray(state.arrays["dpsgd.history"]).tolist() == [[1.1, 0.25, float(rnd * steps)]]
    finally:
        envs.close()
    assert all(np.all(np.isfinite(a)) for a in w)
