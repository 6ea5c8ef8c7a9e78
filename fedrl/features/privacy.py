"""Differential privacy: each mode, the settings that only mean something with DP on, and DP-SGD.

Sizes and budgets (the noise for a target ε, the ring for distributed DP, the count noise) are
computed and checked by ``fedrl.privacy.plan``; the algorithm checks its own DP-SGD limits.
"""

from __future__ import annotations

from fedrl.features.compat import Feature, Rule, setting
from fedrl.features.settings import NORM_OBS_ON


def _audits_nothing(key: str) -> Rule:
    return Rule(("privacy",), key, "there is no DP run to audit",
                lambda cfg: "is set but privacy.mode = off: there is no DP run to audit")


def _adds_no_noise(key: str) -> Rule:
    return Rule(("privacy",), key, "no noise would be added",
                lambda cfg: "is set but privacy.mode = off, so no noise would be added; set privacy.mode = central or "
                            "local, or leave it at 0")


def _only_sum(feature: str, key: str) -> Rule:
    return Rule((feature,), key, "the server sees only the sum",
                lambda cfg: "is not supported with privacy.mode = central and secagg.enabled = true (the server sees "
                            "only the sum)")


def _masked_sum(mode: str) -> Feature:
    """Local DP noises what the server sees; with secure aggregation it sees only the sum."""
    return setting(f"privacy-{mode}", "privacy.mode", mode, excludes=(Rule(
        ("secagg",), "privacy.mode", "the server sees only the masked sum; use privacy.mode = central or distributed",
        lambda cfg: f"privacy.mode = {mode} with secagg.enabled = true: the server sees only the masked sum; use "
                    "privacy.mode = central (nodes clip, the server noises the sum) or distributed (noise added "
                    "inside the ring)"),))


def _not_with_distributed(feature: str, key: str) -> Rule:
    return Rule((feature,), key, "the server sees only the sum",
                lambda cfg: "is not supported with privacy.mode = distributed (the server sees only the sum)")


def _raw_statistics(feature: str, key: str) -> Rule:
    return Rule((feature,), key, "running statistics feed raw data into training outside the clipped gradients",
                lambda cfg: f"with privacy.dpsgd: its running statistics feed raw data into training outside the "
                            f"clipped gradients (auto is on for continuous actions); set {key} = off")


# In checking order: DP on (it needs noise), each mode and what it cannot do, then the settings that
# mean something only with DP on (so a distributed run with an audit hears that distributed cannot
# audit, not that the audit wants central DP).
PRIVACY = (
    Feature("privacy", "privacy.mode", "privacy.mode is not off", lambda cfg: cfg.privacy.mode != "off",
            requires=(Rule(
                ("privacy-noise-multiplier", "privacy-target-epsilon"), "privacy.noise-multiplier", "DP needs noise",
                lambda cfg: f"privacy.mode = {cfg.privacy.mode} needs noise: set privacy.noise-multiplier > 0 or "
                            "privacy.target-epsilon > 0"),
            ), excludes=(
                Rule(("local",), "privacy.mode", "there is no aggregate to protect",
                     lambda cfg: "privacy.mode with strategy.name = local: there is no aggregate to protect"),
                Rule(("norm-obs",), "algo.norm-obs", "each node's observation statistics would travel without noise",
                     lambda cfg: f"privacy.mode = {cfg.privacy.mode} with {NORM_OBS_ON}: each node's observation "
                                 "statistics would travel without noise; set algo.norm-obs = off"),
            )),
    setting("privacy-central", "privacy.mode", "central"),
    _masked_sum("local"),
    setting("privacy-distributed", "privacy.mode", "distributed", requires=(Rule(
        ("secagg",), "privacy.mode", "the nodes' noise shares protect only a sum the server cannot see unmasked",
        lambda cfg: "privacy.mode = distributed needs secagg.enabled = true: the nodes' noise shares protect only a "
                    "sum the server cannot see unmasked"),
    ), excludes=(
        _not_with_distributed("privacy-adaptive-clip", "privacy.adaptive-clip"),
        _not_with_distributed("privacy-audit", "privacy.audit-canaries"),
        _not_with_distributed("privacy-unsafe-no-noise", "privacy.unsafe-no-noise"),
    )),
    Feature("privacy-adaptive-clip", "privacy.adaptive-clip", "privacy.adaptive-clip = true with privacy.mode on",
            lambda cfg: cfg.privacy.adaptive_clip and cfg.privacy.mode != "off", requires=(Rule(
                ("privacy-central",), "privacy.adaptive-clip", "each node's clipped-or-not bit is noised by the server",
                lambda cfg: f"needs privacy.mode = central (got {cfg.privacy.mode}): each node's clipped-or-not bit is "
                            "noised by the server"),), excludes=(_only_sum("secagg", "privacy.adaptive-clip"),)),
    Feature("privacy-audit", "privacy.audit-canaries", "privacy.audit-canaries > 0",
            lambda cfg: cfg.privacy.audit_canaries > 0,
            requires=(
                _audits_nothing("privacy.audit-canaries"),
                Rule(("privacy-central",), "privacy.audit-canaries", "the audit plants canaries in the server's "
                     "noisy sum",
                     lambda cfg: "the audit plants canaries in the server's noisy sum: it needs privacy.mode = "
                                 f"central (got {cfg.privacy.mode})"),
            ), excludes=(Rule(
                ("privacy-adaptive-clip",), "privacy.audit-canaries", "the canaries would move the clip norm",
                lambda cfg: "with privacy.adaptive-clip = true is not supported: the canaries would move the clip "
                            "norm; audit a fixed clip norm"), _only_sum("secagg", "privacy.audit-canaries"))),
    setting("privacy-unsafe-no-noise", "privacy.unsafe-no-noise", True, requires=(
        _audits_nothing("privacy.unsafe-no-noise"),
        Rule(("privacy-audit",), "privacy.unsafe-no-noise", "it is only for checking the privacy audit",
             lambda cfg: "is only for checking the privacy audit and needs privacy.audit-canaries > 0"),
    )),
    Feature("privacy-target-epsilon", "privacy.target-epsilon", "privacy.target-epsilon > 0",
            lambda cfg: cfg.privacy.target_epsilon > 0,
            requires=(_adds_no_noise("privacy.target-epsilon"),)),
    Feature("privacy-noise-multiplier", "privacy.noise-multiplier", "privacy.noise-multiplier > 0",
            lambda cfg: cfg.privacy.noise_multiplier > 0,
            requires=(_adds_no_noise("privacy.noise-multiplier"),)),
    # Replay learners: their sampling and privacy unit are not DP-SGD's (docs/privacy.md says what an
    # off-policy DP-SGD would need); the algorithms refuse it too, for callers that skip validation.
    setting("replay", "algo.name", "dqn", "sac"),
    setting("dpsgd", "privacy.dpsgd", True, excludes=(
        _raw_statistics("norm-obs", "algo.norm-obs"),
        _raw_statistics("norm-reward", "algo.norm-reward"),
        Rule(("replay",), "privacy.dpsgd", "a replay learner reuses transitions across gradient steps and rounds, "
             "which DP-SGD's accounting does not cover",
             lambda cfg: f"with algo.name = {cfg.algo.name}: a replay learner reuses transitions across gradient "
                         "steps and rounds at a rate DP-SGD's accounting does not cover (docs/privacy.md); use "
                         "privacy.mode = central, local or distributed (node-level DP) instead"),
    )),
)
