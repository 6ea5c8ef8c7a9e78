"""DP-SGD in local training: Opacus' per-segment clipping and accounting across rounds, and its checks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from opacus import GradSampleModule
from opacus.accountants import RDPAccountant

from fedrl.config import from_run_config
from fedrl.envs.make import make_vector_env
from fedrl.errors import ConfigError
from fedrl.privacy.plan import sample_plan
from fedrl.rl.dpsgd import module_errors
from fedrl.rl.losses import entropy_floor_penalty
from fedrl.rl.networks import ActorCritic, PolicySpec
from fedrl.rl.train import LocalPlan, NodeState, iterations_per_round, train_locally
from fedrl.server.federation import initial_weights, policy_spec, variants_of

DPSGD = {"privacy.dpsgd": True, "privacy.dpsgd-noise-multiplier": 1.1, "privacy.dpsgd-clip-norm": 0.5,
         "algo.local-steps": 512, "algo.hidden": "16", "nodes.count": 2}


PENDULUM = {"env.id": "Pendulum-v1", "env.vary": "g=linspace(9.0, 11.0)", "algo.norm-obs": "off",
            "algo.norm-reward": "off"}


def test_opacus_handles_both_policies_and_names_what_it_cannot_handle() -> None:
    assert module_errors(ActorCritic(PolicySpec(4, "discrete", 2, (16,)))) == []
    assert module_errors(ActorCritic(PolicySpec(3, "continuous", 2, (16,)))) == []
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
])
def test_dpsgd_settings_that_cannot_work_fail_before_round_1(over: dict, key: str, words: str) -> None:
    cfg = from_run_config({**DPSGD, **over})
    with pytest.raises(ConfigError) as err:
        sample_plan(cfg, ActorCritic(policy_spec(cfg, variants_of(cfg)[0])))
    assert err.value.key == key and words in str(err.value), str(err.value)


def test_per_sample_gradients_of_the_log_std_match_a_loop_over_samples() -> None:
    """Opacus' per-segment gradients (the log-std's grad sampler, and the Linear layers') equal
    each segment's gradient computed alone, for a PPO-like loss of log-probs, entropy and values."""
    torch.manual_seed(0)
    model = ActorCritic(PolicySpec(3, "continuous", 2, (16,)))
    with torch.no_grad():
        model.log_std.copy_(torch.tensor([-0.4, 0.3]))
    obs, actions, adv = torch.randn(5, 7, 3), torch.randn(5, 7, 2), torch.randn(5, 7)

    def loss(o: torch.Tensor, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        logp, ent = model.log_prob_entropy(o, a)
        return -(logp * w).mean() - 0.01 * ent.mean() + 0.5 * model.value(o).pow(2).mean()

    gsm = GradSampleModule(model, loss_reduction="mean")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the first layers' inputs need no gradient
        loss(obs, actions, adv).backward()
    batched = {n: p.grad_sample.clone() for n, p in model.named_parameters()}  # type: ignore[union-attr]
    gsm._close()
    assert batched["std.log_std"].shape == (5, 2)
    for i in range(5):
        model.zero_grad()
        loss(obs[i:i + 1], actions[i:i + 1], adv[i:i + 1]).backward()
        for n, p in model.named_parameters():
            assert p.grad is not None
            torch.testing.assert_close(batched[n][i], p.grad, rtol=1e-5, atol=1e-6, msg=n)
    assert float(batched["std.log_std"].abs().sum()) > 0


def test_the_entropy_floor_is_one_term_per_sample_under_dpsgd() -> None:
    """``ppo.ent-floor``'s hinge is per state, so Opacus' per-segment gradients of a loss with it
    equal each segment's gradient alone (a hinge on the batch's mean entropy would not be)."""
    torch.manual_seed(1)
    model = ActorCritic(PolicySpec(4, "discrete", 3, (16,)))
    with torch.no_grad():  # logits large enough that some states sit below the floor and some above
        for p in model.actor.parameters():
            p.mul_(30.0)
    obs, actions = torch.randn(6, 5, 4), torch.randint(0, 3, (6, 5))
    floor = float(model.log_prob_entropy(obs, actions)[1].median())  # half the states below it

    def loss(o: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        logp, ent = model.log_prob_entropy(o, a)
        return -logp.mean() + entropy_floor_penalty(ent, floor).mean()

    ent = model.log_prob_entropy(obs, actions)[1]
    assert bool((ent < floor).any()) and bool((ent > floor).any())
    gsm = GradSampleModule(model, loss_reduction="mean")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        loss(obs, actions).backward()
    batched = {n: p.grad_sample.clone() for n, p in model.named_parameters()  # type: ignore[union-attr]
               if getattr(p, "grad_sample", None) is not None}  # the critic is not in this loss
    gsm._close()
    assert any(n.startswith("actor") for n in batched)
    for i in range(6):
        model.zero_grad()
        loss(obs[i:i + 1], actions[i:i + 1]).backward()
        for n, p in model.named_parameters():
            if n in batched:
                assert p.grad is not None
                torch.testing.assert_close(batched[n][i], p.grad, rtol=1e-5, atol=1e-6, msg=n)


@pytest.mark.parametrize("env", [{}, PENDULUM], ids=["discrete", "continuous"])
def test_local_training_accounts_every_step_and_the_history_continues_across_rounds(env: dict) -> None:
    cfg = from_run_config({**DPSGD, **env})
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
