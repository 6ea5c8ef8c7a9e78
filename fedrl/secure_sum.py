"""What the unmasked ring sum of a secure round means: the ring's width, and the mean update.

Secure aggregation (``fedrl.secagg``) leaves the server one ring sum of the survivors' codes
(``fedrl.compression.ring_codes``, or distributed DP's noised codes) with their summed weight
ratio in the last slot. These two functions turn a federation's settings into the ring width a
round needs, and the sum into the mean update to apply (with DP: one ledger step).
"""

from __future__ import annotations

import numpy as np

from fedrl.compression.ring_codes import RingCoding, required_ring_bits
from fedrl.federation import Federation


def ring_bits(fed: Federation, nodes: int) -> int:
    """The ring width for a round of ``nodes`` nodes: distributed DP's, ``secagg.bits``, or the
    smallest ring in which ``nodes`` codes cannot wrap."""
    if fed.privacy is not None and fed.privacy.dist is not None:
        return fed.privacy.dist.bits
    return fed.cfg.secagg.bits or required_ring_bits(fed.cfg.compression.bits, nodes)


def mean_update(fed: Federation, total: np.ndarray, survivors: int, rnd: int) -> tuple[np.ndarray, float]:
    """(mean update, summed weight ratio) from the unmasked ring sum of ``survivors`` nodes.

    With DP, one ledger step and a division by ``Federation.dp_denominator``: under distributed
    DP the nodes' noise is in the sum; under central DP the nodes clipped and the noise is added
    here. Without DP, the weighted mean of the decoded codes."""
    if fed.dp is None or fed.privacy is None:
        return RingCoding.for_config(fed.cfg).decode_sum(total, survivors)
    if fed.privacy.dist is not None:
        return fed.dp.distributed_mean(total, survivors, fed.dp_denominator(rnd)), float(total[-1])
    summed, ratio_sum = RingCoding.for_config(fed.cfg).decode_total(total, survivors)
    return fed.dp.secure_mean(summed, fed.dp_denominator(rnd)), ratio_sum
