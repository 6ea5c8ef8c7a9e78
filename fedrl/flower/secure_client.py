"""Node side of secure aggregation: each stage is one message, the session lives in ``context.state``.

After training, the node turns its update into ring codes (``RingCoding``: weight folded in,
clipped, quantized), starts a ``secagg.ClientSession`` and answers the plan with its public keys.
The codes and the session (which holds secrets) stay in the node's ``context.state`` between
stages and are erased after unmasking. A stage message for another round or session than the
stored one is refused.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, RecordDict

from fedrl.compression.packing import pack_bits, unpack_bits
from fedrl.compression.ring_codes import RingCoding, required_ring_bits
from fedrl.config import Config
from fedrl.dropout import maybe_fail
from fedrl.flower import secure_codec as sc
from fedrl.flower.codec import REPORTED_METRICS, WireError
from fedrl.secagg import ClientSession, Params, make_params
from fedrl.seeding import SECAGG, derive

_KEY = "fedrl.secagg"


def start(cfg: Config, context: Context, node: int, rnd: int, setup: sc.Setup, delta: np.ndarray,
          env_steps: int, metrics: dict[str, float]) -> RecordDict:
    """Encode the trained update, open the session and return the stage-1 reply (public keys)."""
    need = required_ring_bits(cfg.compression.bits, len(setup.nodes))
    if setup.bits < need:
        raise WireError(f"the server asks for a {setup.bits}-bit ring; {len(setup.nodes)} nodes need {need}")
    if setup.length != delta.size + 1:
        raise WireError(f"the server expects {setup.length} ring elements, this update has {delta.size + 1}")
    params = make_params(rnd, setup.session, setup.nodes, setup.neighbors, setup.threshold, setup.bits,
                         setup.length, setup.graph_seed)
    x = RingCoding.for_config(cfg).encode(delta, env_steps, np.random.default_rng(derive(cfg.seed, SECAGG, rnd, node)))
    session = ClientSession.new(node, params)
    keys = session.advertise()
    _store(context, node, params, session, x, cfg.compression.bits)
    maybe_fail(cfg, rnd, node, "advertise")
    return sc.encode_keys(keys, {k: v for k, v in metrics.items() if k in REPORTED_METRICS} if cfg.secagg.send_metrics else None)


def _store(context: Context, node: int, params: Params, session: ClientSession, x: np.ndarray | None,
           code_bits: int = 16) -> None:
    arrays = {f"s.{k}": v for k, v in session.to_arrays().items()}
    arrays.update({f"p.{k}": v for k, v in params.to_arrays().items()})
    if x is not None:
        # The state travels with every stage message: keep the codes at their bit width.
        arrays["x"] = pack_bits(x, code_bits)
        arrays["x.n"] = np.asarray([x.size, code_bits], np.int64)
    context.state[f"{_KEY}{node}"] = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def _load(context: Context, msg: Message) -> tuple[int, Params, ClientSession, np.ndarray | None]:
    node, rnd, session_id = sc.head(msg.content)
    key = f"{_KEY}{node}"
    if key not in context.state.array_records:
        raise WireError(f"node {node} has no secure-aggregation session")
    rec = context.state.array_records[key]
    arrays = {k: rec[k].numpy() for k in rec}
    params = Params.from_arrays({k[2:]: v for k, v in arrays.items() if k.startswith("p.")})
    if (params.round, params.session) != (rnd, session_id):
        raise WireError(f"node {node}: message for round {rnd} does not match the open session "
                        f"(round {params.round}); replayed or stale")
    session = ClientSession.from_arrays(node, params, {k[2:]: v for k, v in arrays.items() if k.startswith("s.")})
    if "x" not in arrays:
        return node, params, session, None
    n, code_bits = (int(v) for v in arrays["x.n"])
    return node, params, session, unpack_bits(arrays["x"], code_bits, n).astype(np.uint64)


def handle_share(msg: Message, context: Context, cfg: Config) -> Message:
    node, params, session, x = _load(context, msg)
    maybe_fail(cfg, params.round, node, "share")
    cts = session.share(sc.decode_share_request(msg.content))
    _store(context, node, params, session, x, cfg.compression.bits)
    return Message(sc.encode_ciphertexts(node, params.round, params.session, cts), reply_to=msg)


def handle_mask(msg: Message, context: Context, cfg: Config) -> Message:
    node, params, session, x = _load(context, msg)
    if x is None:
        raise WireError(f"node {node} has no encoded update to mask")
    maybe_fail(cfg, params.round, node, "mask")
    masked = session.mask(x, sc.decode_ciphertexts(msg.content))
    _store(context, node, params, session, None)  # the plain codes are no longer needed
    return Message(sc.encode_masked(masked, params.bits), reply_to=msg)


def handle_unmask(msg: Message, context: Context, cfg: Config) -> Message:
    node, params, session, _ = _load(context, msg)
    maybe_fail(cfg, params.round, node, "unmask")
    survivors, dropped = sc.decode_unmask_request(msg.content)
    shares = session.unmask(survivors, dropped)
    del context.state[f"{_KEY}{node}"]  # the session is spent: forget its secrets
    return Message(sc.encode_shares(node, params.round, params.session, shares), reply_to=msg)
