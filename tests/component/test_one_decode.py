"""Each reply's compressed update is decoded once per round: the server's check decodes it and the
rule aggregates what the check decoded (``Reply.decoded``), for classic error feedback and EF21 alike.

Counted on real rounds through the ClientApp handler (``tests.inprocess``): every server-side call
of the uplink decoder (``fedrl.compression.pipeline.decompress`` as ``Federation`` uses it, and
``ServerEF21.estimate``, which decodes once; the in-process nodes' own EF21 decodes are not counted).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedrl.compression import ef21
from fedrl.config import from_run_config
from fedrl.model.layout import flatten
from fedrl.server import federation
from fedrl.server.federation import Federation
from tests.inprocess import run_rounds, task  # noqa: F401 - the fixture

RUN = {"nodes.count": 3, "num-server-rounds": 2, "algo.local-steps": 256, "eval.episodes": 1,
       "algo.norm-obs": "off"}


@pytest.mark.usefixtures("task")
@pytest.mark.parametrize("over", [
    {"compression.up": "quantize"},
    {"compression.up": "topk", "compression.fraction": 0.1},  # classic error feedback (auto: on)
    {"compression.up": "topk", "compression.fraction": 0.1, "compression.error-feedback": "ef21"},
], ids=["quantize", "topk-ef", "topk-ef21"])
def test_a_round_decodes_each_reply_once(over: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    for owner, name in ((federation, "decompress"), (ef21.ServerEF21, "estimate")):
        real = getattr(owner, name)

        def counted(*args: Any, _real: Any = real) -> np.ndarray:
            calls.append(1)
            return _real(*args)  # type: ignore[no-any-return]

        monkeypatch.setattr(owner, name, counted)
    fed = Federation(from_run_config({**RUN, **over}))
    start = flatten(fed.models[0])
    assert run_rounds(fed, {**RUN, **over}, 2) == [{}, {}]
    assert len(calls) == 2 * 3  # 2 rounds x 3 replies (today's code decoded each twice: 12)
    assert np.all(np.isfinite(flatten(fed.models[0]))) and not np.array_equal(flatten(fed.models[0]), start)
