"""eval.nodes: the server evaluates a seeded sample of the nodes' variants (issue 16, item 4).

For a thousand-node federation, evaluating every variant every round would cost more than the
round; a fixed sample of N nodes keeps the curves comparable round to round. Checked: the sample
(seeded, sorted, the same for the whole run), the returns are those of evaluating those
variants, and metrics rows, summary.json and config.json name the sampled nodes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrl.cli import main
from fedrl.config import from_run_config
from fedrl.rl.evaluate import evaluate
from fedrl.server.evaluation import eval_nodes
from fedrl.server.federation import Federation
from tests.component.one_round import one_round

REPO = Path(__file__).resolve().parents[2]
SMALL = {"nodes.count": 12, "algo.local-steps": 256, "eval.episodes": 1, "env.kwargs": "max_episode_steps=50",
         "env.vary": "length=uniform(0.3, 0.9)"}


def test_the_sample_is_seeded_sorted_and_all_when_off() -> None:
    cfg = from_run_config({**SMALL, "eval.nodes": 4})
    nodes = eval_nodes(cfg)
    assert len(nodes) == 4 and nodes == sorted(set(nodes)) and all(0 <= i < 12 for i in nodes)
    assert eval_nodes(cfg) == nodes
    assert eval_nodes(from_run_config({**SMALL, "eval.nodes": 4, "seed": 1})) != nodes
    assert eval_nodes(from_run_config(SMALL)) == list(range(12))
    assert eval_nodes(from_run_config({**SMALL, "eval.nodes": 12})) == list(range(12))


def test_rows_summary_and_config_name_the_sampled_nodes(tmp_path: Path) -> None:
    fed = Federation(from_run_config({**SMALL, "eval.nodes": 3, "num-server-rounds": 1,
                                      "output-dir": str(tmp_path), "run-name": "r"}))
    nodes = fed.evaluation.nodes
    want = evaluate(fed.spec, fed.models[0], fed.moments[0], "CartPole-v1", [fed.variants[i] for i in nodes],
                    fed.kwargs, 1, fed.cfg.seed, nodes=nodes)
    row, summary, config = one_round(fed, tmp_path / "r")
    assert row["eval_returns"] == want
    assert [e["node"] for e in summary["eval"]] == nodes == config["eval_nodes"]
    assert [e["params"] for e in summary["eval"]] == [fed.variants[i] for i in nodes]
    assert summary["eval_min_return"] == min(want)


def test_a_sample_larger_than_the_federation_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(REPO), "--run-config", "nodes.count=4 eval.nodes=5"]) != 0
    assert "eval.nodes: got 5; at most nodes.count = 4" in capsys.readouterr().err
