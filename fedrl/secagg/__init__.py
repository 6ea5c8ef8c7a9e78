"""Secure aggregation: SecAgg (Bonawitz et al., CCS 2017) with SecAgg+'s sparse graph (Bell et al., CCS 2020).

Pure-Python state machines over typed messages (ints, bytes, numpy arrays), with no Flower
import, so transport code can map them onto any record format. The server learns only the ring
sum of the surviving nodes' inputs mod ``2**bits``.

Flow per round: ``make_params`` -> ``ClientSession.advertise`` -> ``SecAggServer.collect_keys`` ->
``share`` -> ``collect_shares`` -> ``mask`` -> ``collect_masked`` -> ``unmask`` -> ``SecAggServer.unmask``.

Importing this package loads the client side and what both sides share, never the server's state
machine (:mod:`fedrl.secagg.server`): a ClientApp imports ``fedrl.secagg`` and must not carry the
server. Import :class:`~fedrl.secagg.server.SecAggServer` from :mod:`fedrl.secagg.server`. A whole
round run in-process, for tests and benchmarks, is ``simulations/tooling/secagg_round.py``.
"""

from __future__ import annotations

from fedrl.secagg.client import ClientSession
from fedrl.secagg.crypto import KeyPair, agree, decrypt_share, encrypt_share, prg_mask
from fedrl.secagg.errors import ClientRefused, SecAggAbort, ShareRejected, StageError
from fedrl.secagg.graph import neighbour_graph
from fedrl.secagg.messages import Keys, Masked
from fedrl.secagg.params import Params, make_params
from fedrl.secagg.ring import required_bits, ring_add, ring_sub, ring_sum
from fedrl.secagg.shamir import combine, split_secret

__all__ = [
    "ClientRefused",
    "ClientSession",
    "KeyPair",
    "Keys",
    "Masked",
    "Params",
    "SecAggAbort",
    "ShareRejected",
    "StageError",
    "agree",
    "combine",
    "decrypt_share",
    "encrypt_share",
    "make_params",
    "neighbour_graph",
    "prg_mask",
    "required_bits",
    "ring_add",
    "ring_sub",
    "ring_sum",
    "split_secret",
]

