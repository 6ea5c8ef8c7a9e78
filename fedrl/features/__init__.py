"""Every feature of a run, with what it requires and excludes and why (``fedrl.features.compat`` checks them).

A new feature adds one declaration in the module of its kind, naming the features it cannot
combine with; nothing else changes. The messages are the ones users see (tests assert them).
Order is the order of checking: a run that breaks several rules hears of the first. Checks that
are not about combinations (sizes, counts, graphs) are in ``fedrl.checks.settings``.
"""

from __future__ import annotations

from fedrl.features.aggregation import AGGREGATION, SCHEDULE, STRATEGIES
from fedrl.features.compat import Feature
from fedrl.features.components import RULE_CAPABILITIES
from fedrl.features.privacy import PRIVACY
from fedrl.features.secure import SECURE
from fedrl.features.settings import SETTINGS

FEATURES: tuple[Feature, ...] = SECURE + SETTINGS + STRATEGIES + AGGREGATION + SCHEDULE + PRIVACY + RULE_CAPABILITIES

__all__ = ["FEATURES"]
