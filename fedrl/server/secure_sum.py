"""What the unmasked ring sum of a secure round means: the ring's width, and the mean update.

Secure aggregation (``fedrl.secagg``) leaves the server one ring sum of the survivors' codes
(``fedrl.compression.ring_codes``, or distributed DP's noised codes) with their summed weight
ratio in the last slot. These two functions turn a federation's settings into the ring width a
round needs, and the sum into the mean update to apply (with DP: one ledger step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fedrl.compression.ring_codes import RingCoding, required_ring_bits

if TYPE_CHECKING:
    from fedrl.server.federation import Federation


def ring_bits(fed: Federation, nodes: int) -> int:
    """The ring width for a round of ``nodes`` nodes: distributed DP's, ``secagg.bits``, or the
    smallest ring in which ``nodes`` codes cannot wrap."""
    if fed.privacy is not None and fed.privacy.dist is not None:
        return fed.privacy.dist.bits
    return fed.cfg.secagg.bits or required_ring_bits(fed.cfg.compression.bits, nodes)


def mean_update(fed: Federation, total: np.ndarray, survivors: int, rnd: int, share: float = 1.0,
                account: bool = True) -> tuple[np.ndarray, float]:
    """(mean update, summed weight ratio) from the unmasked ring sum of ``survivors`` nodes.

    With DP, a division by ``Federation.dp_denominator`` times ``share`` (the part of the round's
    selected nodes this sum stands for: 1 for the star, an edge's part of the nodes under a
    hierarchy) and one ledger step: under distributed DP the nodes' noise is in the sum; under
    central DP the nodes clipped and the noise is added here, and ``account = False`` leaves the
    ledger step to the caller (a round of several disjoint sums takes one). Without DP, the
    weighted mean of the decoded codes."""
    if fed.dp is None or fed.privacy is None:
        return RingCoding.for_config(fed.cfg).decode_sum(total, survivors)
    selected = fed.dp_denominator(rnd) * share
    if fed.privacy.dist is not None:
        if not account or share != 1.0:
            raise ValueError("distributed DP sizes each node's noise for one sum of every selected node")
        return fed.dp.distributed_mean(total, survivors, selected), float(total[-1])
    summed, ratio_sum = RingCoding.for_config(fed.cfg).decode_total(total, survivors)
    return fed.dp.secure_mean(summed, selected, account), ratio_sum
