"""A federation over shaped links: the SuperLink and each SuperNode in a network namespace of
its own (``simulations/tooling/netlab.py``), every link 100 ms RTT, 1% loss each way, 2 Mbit/s each way.

Needs root and iproute2 (CI runs as root); skipped with the reason where a lab cannot be built.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tooling.netlab import HUB_ADDRESS, Link, NetLab, unavailable

from tests.e2e.deploy import Deployment, metrics_rows

WHY = unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=f"no network lab here: {WHY}")]

SHAPED = Link(delay_ms=50, loss=0.01, rate_mbit=2)


def test_three_rounds_over_100ms_rtt_1pct_loss_2mbit_links(tmp_path: Path) -> None:
    hosts = ["node0", "node1"]
    with NetLab(["server", *hosts], SHAPED, seed=0) as lab:
        dep = Deployment(tmp_path / "d", 2, wrap=lab.wrap, hosts=hosts, link_ip=HUB_ADDRESS)
        try:
            dep.start()
            out = tmp_path / "runs"
            code, _ = dep.flwr_run(f"num-server-rounds=3 nodes.count=2 algo.local-steps=256 eval.episodes=2 "
                                   f"output-dir='{out}' run-name='net'", 600)
            rows = metrics_rows(out / "net")
            context = f"backend {lab.backend}; flwr run exit code {code}\n" + "\n".join(map(str, rows)) + dep.log_text()
            assert code == 0 and (out / "net" / "summary.json").exists(), context
            assert [r["round"] for r in rows] == [1, 2, 3], context
            assert all(r["nodes_trained"] == [0, 1] and r["nodes_failed"] == {} for r in rows), context
        finally:
            dep.stop()
        assert not dep.leftovers(), dep.leftovers()
