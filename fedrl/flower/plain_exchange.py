"""A plain round's exchange on Flower's Grid: every selected node gets its plan, its reply is checked.

Plans go out in waves (``transport.exchange``: a SuperNode that serves several logical nodes
never gets two at once, or gets a cohort message with ``nodes.cohort-size``); each reply is
decoded against the layout of the model its node was sent and checked by the server
(``Federation.check``: errors, node id, shapes or payload, finite values), which decodes a
compressed update once. Late work from an earlier round is reaped first, and a restarted
SuperNode takes its partition's place again.
"""

from __future__ import annotations

from flwr.serverapp import Grid

from fedrl.flower import codec
from fedrl.flower.transport import BUSY, NodeMap, check_reply, exchange, reap_late, rejoin
from fedrl.server.delivery import Replies
from fedrl.server.federation import Federation
from fedrl.wire import Reply


class PlainExchange:
    def __init__(self, grid: Grid, nm: NodeMap) -> None:
        self.grid, self.nm = grid, nm

    def train(self, fed: Federation, rnd: int, chosen: list[int]) -> Replies:
        grid, nm = self.grid, self.nm
        deadline = fed.cfg.round.deadline_s
        reap_late(grid, fed, nm)
        rejoin(grid, nm)
        bad = {node: BUSY for node in chosen if nm.busy(node)}
        plans = {node: codec.encode_plan(*fed.plan(node, rnd)) for node in chosen if node not in bad}
        good: list[Reply] = []
        for node, r in exchange(grid, fed, nm, plans, codec.TRAIN, rnd, deadline, fed.cfg.nodes.cohort_size).items():
            checked = check_reply(fed, r, node, deadline)
            if isinstance(checked, str):
                bad[node] = checked
            else:
                good.append(checked)
        return Replies(chosen, good, bad)
