"""Checks that need more than one key or a real environment; all run before round 1.

``check(run_config)`` is what ``fedrl check``, ``fedrl run`` and the ServerApp call, and the one
place that calls every check: it parses (unknown keys, types, ranges), checks the algorithm and
the environments (``validate``), then which features combine (declared in ``fedrl.features``,
checked by ``fedrl.features.compat``), then each feature's sizes and counts (``fedrl.checks.settings``) and
the privacy plan, raising a ``ConfigError`` that names the key and what is allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fedrl.checks import settings as setting_checks
from fedrl.checks.envs import check_environments
from fedrl.config import Config, from_run_config, norm_on
from fedrl.envs.families import check_env_id, check_params, check_values
from fedrl.envs.spec import parse_kwargs, parse_vary, sample_heldout, sample_variant
from fedrl.envs.symmetry import MIRRORS, mirror_for
from fedrl.errors import ConfigError
from fedrl.features import FEATURES
from fedrl.features.compat import conflict
from fedrl.features.settings import continuous_actions
from fedrl.inject import speed
from fedrl.privacy.plan import plan_for, sample_plan
from fedrl.registry.algorithms import get as algorithm


def validate(cfg: Config) -> None:
    algorithm(cfg.algo.name).check(cfg)  # its own settings (PPO: a round is whole rollouts)
    if not cfg.algo.norm_obs_center and cfg.algo.norm_obs == "off":
        raise ConfigError("algo.norm-obs-center", "false says how observations are normalized, but algo.norm-obs is "
                                                  "off; set algo.norm-obs to on, server or auto, or drop the key")
    _check_mirror(cfg)
    if cfg.resume == "true" and not cfg.run_name:
        raise ConfigError("resume", "resume=true needs run-name (or give the run folder path as resume)")
    check_env_id(cfg.env.id)
    speed.check(cfg)
    specs = parse_vary(cfg.env.vary)
    check_params(cfg.env.id, specs.keys())
    kwargs = parse_kwargs(cfg.env.kwargs)
    variants = [sample_variant(specs, i, cfg.nodes.count, cfg.seed) for i in range(cfg.nodes.count)]
    # eval.held-out: variants no node trains on, checked like the nodes' (listed after them)
    heldout = [sample_heldout(specs, j, variants, cfg.seed) for j in range(cfg.eval.held_out)]
    for v in variants + heldout:
        check_values(cfg.env.id, v)
    check_environments(cfg, variants + heldout, kwargs)


def _check_mirror(cfg: Config) -> None:
    """``algo.mirror = true`` needs a declared symmetry, PPO's actor-critic, and inputs that the
    mirror commutes with (``fedrl.rl.networks.mirrored``)."""
    if not cfg.algo.mirror:
        return
    if mirror_for(cfg.env.id) is None:
        raise ConfigError("algo.mirror", f"env.id = {cfg.env.id} declares no mirror symmetry; true works with "
                                         f"{', '.join(MIRRORS)} (fedrl.envs.symmetry); set algo.mirror = false")
    if cfg.algo.name != "ppo":
        raise ConfigError("algo.mirror", f"the mirror-symmetric policy is PPO's actor-critic; algo.name = "
                                         f"{cfg.algo.name} has its own network; use algo.name = ppo or algo.mirror = false")
    # auto is off for discrete actions wherever from_run_config left it auto (gossip, DP-SGD)
    setting = cfg.algo.norm_obs
    if norm_on(setting, setting == "auto" and continuous_actions(cfg)) and cfg.algo.norm_obs_center:
        raise ConfigError("algo.mirror", "a mirrored observation is the observation with some signs flipped, which "
                                         "survives normalization only when the statistics' mean is not subtracted; "
                                         "set algo.norm-obs-center = false (or algo.norm-obs = off)")


GOSSIP_MIN_FRACTION = 0.05  # top-k's kept share below which gossip's nodes barely mix (measured, issue 43)


def config_warnings(cfg: Config) -> list[str]:
    """Settings that work but weaken a guarantee, each one line naming the key and the risk."""
    out = []
    t = cfg.secagg.threshold
    if cfg.secagg.enabled and t <= 0.5:
        out.append(f"secagg.threshold = {t:g} <= 0.5: a server that sends different survivor lists to different "
                   "nodes can collect one node's mask-key shares from some holders and its self-mask shares from "
                   "others, and so recover that node's input; use a threshold above 0.5 unless the server is "
                   "trusted to follow the protocol")
    c = cfg.compression
    if cfg.topology.name == "gossip" and c.up in ("topk", "randk") and c.fraction < GOSSIP_MIN_FRACTION:
        out.append(f"compression.fraction = {c.fraction:g} with topology.name = gossip: CHOCO's public copies take in "
                   f"only that share of each node's change a round, so the nodes barely mix in a run of rounds; on "
                   f"fedrl's default heterogeneous CartPole (30 rounds, ring) top-k 1% left a variant unsolved on 5 "
                   f"of 5 seeds, top-k 5% solved 5 of 5 (docs/stability.md); use compression.fraction >= "
                   f"{GOSSIP_MIN_FRACTION:g} or compression.up = quantize")
    return out


def _combination_error(cfg: Config) -> ConfigError | None:
    return conflict(cfg, FEATURES)


# After ``validate``: a value's own range, which features combine, then what their sizes allow.
_IN_ORDER: tuple[Callable[[Config], ConfigError | None], ...] = (
    setting_checks.compression_fraction_error, setting_checks.eval_nodes_error, _combination_error,
    setting_checks.secagg_error,
    setting_checks.byzantine_error, setting_checks.hierarchy_error, setting_checks.gossip_graph_error,
    setting_checks.asynchronous_error, setting_checks.tensorboard_error)


def check(run_config: Mapping[str, Any]) -> Config:
    cfg = from_run_config(run_config)
    validate(cfg)
    for find_error in _IN_ORDER:
        if (err := find_error(cfg)) is not None:
            raise err
    p = cfg.privacy
    if p.mode != "off" or p.target_epsilon or p.noise_multiplier or p.audit_canaries or p.unsafe_no_noise or p.dpsgd:
        from fedrl.experiment import policy_spec, variants_of
        from fedrl.registry.algorithms import get as algorithm
        from fedrl.rl.networks import weight_layout

        spec = policy_spec(cfg, variants_of(cfg)[0])
        model = algorithm(cfg.algo.name).model_for(cfg)(spec)  # the run's model: its size is what DP plans for
        plan_for(cfg, spec.action_kind == "continuous", sum(t.numel() for t in model.parameters()),
                 layout=weight_layout(model))
        sample_plan(cfg, model)
    return cfg
