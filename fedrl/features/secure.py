"""Secure aggregation, and what cannot feed it: the server sees only the sum of masked codes."""

from __future__ import annotations

from fedrl.config import Config
from fedrl.features.compat import Feature, Rule, setting
from fedrl.features.components import UNMASKABLE_UPLINK
from fedrl.features.settings import NORM_OBS_ON
from fedrl.inject.attacks import HOSTILE, kind_names

# fedrl.inject.dropout.SECAGG_STAGES, not imported: fedrl.inject.dropout loads torch, and check --list need not (a test
# checks that the two agree)
SECAGG_STAGES = ("advertise", "share", "mask", "unmask")


def _attack_kinds(cfg: Config) -> set[str]:
    """The attack kinds some node is set to carry out (``attack.nodes`` itself is checked later)."""
    a, names = cfg.attack, kind_names(cfg.attack.name)
    listed = [s for s in a.nodes.split(",") if s.strip()] if a.nodes.strip() else []
    attacks = bool(listed) if a.nodes.strip() else round(a.fraction * cfg.nodes.count) > 0
    return set() if names == ["none"] or not attacks else set(names)


def _hides_updates(features: tuple[str, ...], why: str) -> Rule:
    return Rule(features, "strategy.name", why,
                lambda cfg: f"secagg.enabled = true with strategy.name = {cfg.strategy.name}: {why}")


SECURE = (
    setting("dropout-in-secagg-stage", "nodes.dropout-stage", *SECAGG_STAGES, requires=(Rule(
        ("secagg",), "nodes.dropout-stage", "those stages exist only in the secure-aggregation protocol",
        lambda cfg: f"'{cfg.nodes.dropout_stage}' is a secure-aggregation stage, but secagg.enabled = false; "
                    "use train or any"),)),
    UNMASKABLE_UPLINK,  # what each compressor declares (fedrl.features.components)
    setting("up-topk", "compression.up", "topk"),
    setting("up-quantize", "compression.up", "quantize"),
    setting("secagg", "secagg.enabled", True, requires=(Rule(
        ("up-quantize", "privacy-distributed"), "compression.up",
        "float32 weights cannot be masked in a ring; secure aggregation needs integer codes",
        lambda cfg: f"secagg.enabled = true with compression.up = {cfg.compression.up}: float32 weights cannot be "
                    "masked in a ring; secure aggregation needs integer codes; use compression.up = quantize"),
    ), excludes=(
        _hides_updates(("local",), "keeps one model per node, so it needs each node's update, not their sum"),
        _hides_updates(("robust-rule",), "a robust rule looks at each update (medians, distances), which masking "
                                         "hides"),
        Rule(("error-feedback", "ef21"), "compression.error-feedback", "quantize is unbiased; error feedback is not "
             "supported there",
             lambda cfg: f"secagg.enabled = true with compression.error-feedback = {cfg.compression.error_feedback}: "
                         "quantize is unbiased; error feedback is not supported there"),
        Rule(("norm-obs",), "algo.norm-obs", "each node's observation statistics would travel in the clear",
             lambda cfg: f"secagg.enabled = true with {NORM_OBS_ON}: each node's observation statistics would "
                         "travel in the clear; set algo.norm-obs = off"),
    )),
    Feature("hostile-reply-attack", "attack.name", f"attack.name names one of {', '.join(sorted(HOSTILE))}",
            lambda cfg: bool(_attack_kinds(cfg) & HOSTILE), excludes=(Rule(
                ("secagg",), "attack.name", "with secagg.enabled a node replies with masked shares",
                lambda cfg: f"{', '.join(sorted(_attack_kinds(cfg) & HOSTILE))} rewrite a plain reply; with "
                            "secagg.enabled a node replies with masked shares (use sign-flip, gaussian or "
                            "random-action)"),)),
    Feature("topk-overflow-attack", "attack.name", "attack.name names topk-overflow",
            lambda cfg: "topk-overflow" in _attack_kinds(cfg), requires=(Rule(
                ("up-topk",), "attack.name", "it overflows top-k's index list",
                lambda cfg: f"topk-overflow needs compression.up = topk (got {cfg.compression.up})"),)),
)
