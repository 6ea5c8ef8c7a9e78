"""Compatibility from what components declare: the run's server rule and uplink compressor.

A feature in ``fedrl.features`` is a setting; a *component* is code behind a name in a registry
(``strategy.name``, ``compression.up``), and it states what it can do as class attributes:

- a server rule (``fedrl.rules.base.ServerRule``): ``privatizable`` (central DP may replace its
  mean by a noised one), ``own_privacy`` (the privacy modes it applies itself), ``accepts_sums``
  (it can step with a securely aggregated mean), and the reasons ``not_privatizable``/``no_sums``;
- a compressor (``fedrl.compression.base.Compressor``): ``summable`` and ``unmaskable`` (why its
  payloads cannot feed a masked sum).

The features below read those declarations of whatever the run names, registered from any file,
when the run is checked, so a rule or compressor nobody here knows is held to the same rules as
the built-in ones, and each refusal is written once, with the component's own reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedrl.config import Config
from fedrl.features.compat import Feature, Rule

DP_BY_THE_RULE = ("central", "local")  # modes whose noise or ledger the server rule carries (DP-FedAvg's mean)


@dataclass(frozen=True)
class RuleDeclaration:
    """What a registered server rule declares (the ``ServerRule`` defaults where it is silent)."""

    name: str
    privatizable: bool
    own_privacy: frozenset[str]
    accepts_sums: bool
    not_privatizable: str
    no_sums: str

    def carries_dp(self, mode: str) -> bool:
        """Whether a run in ``privacy.mode = mode`` would noise (and account) what this rule releases."""
        return mode not in DP_BY_THE_RULE or self.privatizable or mode in self.own_privacy


def rule_declaration(name: str) -> RuleDeclaration:
    """The declaration of the rule registered as ``name`` (a topology name included)."""
    from fedrl.registry.rules import declared
    from fedrl.rules.base import ServerRule  # the defaults; server-side, loaded only to check a run

    entry = declared(name)

    def attr(key: str) -> object:
        return getattr(entry, key, getattr(ServerRule, key))

    return RuleDeclaration(name, bool(attr("privatizable")), frozenset(attr("own_privacy")),  # type: ignore[call-overload]
                           bool(attr("accepts_sums")), str(attr("not_privatizable")), str(attr("no_sums")))


def _rule_of(cfg: Config) -> RuleDeclaration:
    from fedrl.registry.rules import rule_name

    return rule_declaration(rule_name(cfg))


def unmaskable_reason(name: str) -> str:
    """Why compressor ``name``'s payloads cannot feed a masked sum ("" when they can)."""
    from fedrl.compression.compressors import KINDS

    kind = KINDS[name]
    if kind.unmaskable:
        return kind.unmaskable
    return "" if kind.summable else ("it declares summable = False, so the sum of its payloads does not decode to the "
                                     "sum of the updates")


UNMASKABLE_UPLINK = Feature(
    "unmaskable-uplink", "compression.up",
    "compression.up names a compressor whose payloads cannot be summed in a ring (fp16, bf16, qsgd, topk, sign, "
    "powersgd, randk, or one registered as not summable)",
    lambda cfg: bool(unmaskable_reason(cfg.compression.up)), excludes=(
        Rule(("privacy-distributed",), "compression.up", "the DP coding (scaled, rounded, noised in the secagg.bits "
             "ring) replaces the compressor",
             lambda cfg: f"privacy.mode = distributed with compression.up = {cfg.compression.up}: the DP coding "
                         "(scaled, rounded, noised in the secagg.bits ring) replaces the compressor; use none or "
                         "quantize"),
        Rule(("secagg",), "compression.up", "its payloads do not sum (the compressor's summable/unmaskable)",
             lambda cfg: f"secagg.enabled = true with compression.up = {cfg.compression.up}: "
                         f"{unmaskable_reason(cfg.compression.up)}; use compression.up = quantize"),
    ))

# Checked after every hand-written feature: those name the built-in rules' conflicts in their own
# words first; these hold any rule, registered from anywhere, to what it declares.
RULE_CAPABILITIES = (
    Feature("rule-without-dp", "strategy.name",
            "the run's rule is not privatizable and does not apply privacy.mode itself (ServerRule.privatizable, "
            "own_privacy)",
            lambda cfg: cfg.privacy.mode != "off" and not _rule_of(cfg).carries_dp(cfg.privacy.mode), excludes=(
                Rule(("privacy-central", "privacy-local"), "strategy.name", "no noise would be added to what it "
                     "releases",
                     lambda cfg: f"{_rule_of(cfg).name} with privacy.mode = {cfg.privacy.mode}: "
                                 f"{_rule_of(cfg).not_privatizable}"),)),
    Feature("rule-without-sums", "strategy.name",
            "the run's rule cannot step with a securely aggregated mean (ServerRule.accepts_sums)",
            lambda cfg: cfg.secagg.enabled and not _rule_of(cfg).accepts_sums, excludes=(
                Rule(("secagg",), "strategy.name", "the server sees only the masked sum",
                     lambda cfg: f"secagg.enabled = true with strategy.name = {_rule_of(cfg).name}: "
                                 f"{_rule_of(cfg).no_sums}"),)),
)


def declarations_table() -> list[str]:
    """Lines for ``fedrl check --list``: every registered rule and compressor with what it declares."""
    from fedrl.compression.compressors import KINDS
    from fedrl.registry.rules import names

    lines = ["Components (their declarations, read when a run is checked):",
             f"{'rule':<16} {'privatizable':<13} {'accepts sums':<13} applies DP itself"]
    for name in names(topologies=True):
        d = rule_declaration(name)
        lines.append(f"{name:<16} {'yes' if d.privatizable else 'no':<13} {'yes' if d.accepts_sums else 'no':<13} "
                     f"{', '.join(sorted(d.own_privacy)) or '-'}")
    lines.append(f"{'compressor':<16} {'summable':<13} masked sums")
    for name, kind in KINDS.items():
        why = unmaskable_reason(name)
        lines.append(f"{name:<16} {'yes' if kind.summable else 'no':<13} {'no: ' + why if why else 'yes'}")
    return lines
