"""Node side of secure aggregation: each stage is one message, the session lives in ``context.state``.

Keys go out ahead: a node answers a ``keys`` request, and every unmask, with two fresh public
keys whose private halves wait in ``context.state`` for its next session (used once, then
erased). The training plan then carries the neighbours' public keys, so after training the node
turns its update into ring codes (``RingCoding``: weight folded in, clipped, quantized), opens
its ``secagg.ClientSession`` and answers with its encrypted shares. The codes and the session
(which holds secrets) stay in the node's ``context.state`` between stages and are erased after
unmasking. A stage message for another round or session than the stored one is refused.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, RecordDict

from fedrl.compression.ring_codes import RingCoding, pack_ring, required_ring_bits, unpack_ring
from fedrl.config import Config
from fedrl.flower import secure_codec as sc
from fedrl.flower.codec import PUBLIC_METRICS, REPORTED_METRICS, WireError
from fedrl.flower.record_fields import array_record
from fedrl.inject.dropout import maybe_fail
from fedrl.privacy.noise import private_rng
from fedrl.privacy.plan import PrivacyPlan
from fedrl.secagg.client import ClientSession
from fedrl.secagg.crypto import KEY_BYTES, KeyPair
from fedrl.secagg.messages import Keys
from fedrl.secagg.params import Params, make_params
from fedrl.seeding import SECAGG, derive

_KEY = "fedrl.secagg"


def _keys_key(node: int) -> str:
    return f"{_KEY}-next{node}"


def _new_keys(context: Context, node: int) -> tuple[bytes, bytes]:
    """Make and keep the private keys of this node's next session; return their public halves."""
    c, s = KeyPair.generate(), KeyPair.generate()
    blob = np.frombuffer(c.private + s.private, dtype=np.uint8).copy()
    context.state[_keys_key(node)] = ArrayRecord({"sk": Array(blob)})
    return c.public, s.public


def has_keys(context: Context, node: int) -> bool:
    """Whether this node holds private keys for a session (checked before training)."""
    return array_record(context.state, _keys_key(node)) is not None


def _take_keys(context: Context, node: int) -> tuple[bytes, bytes]:
    rec = array_record(context.state, _keys_key(node))
    if rec is None:
        raise WireError(f"node {node} holds no secure-aggregation keys; the server must ask for them first")
    raw = rec["sk"].numpy().tobytes()
    del context.state[_keys_key(node)]  # one session per key pair
    if len(raw) != 2 * KEY_BYTES:
        raise WireError(f"node {node}: stored keys are malformed")
    return raw[:KEY_BYTES], raw[KEY_BYTES:]


def keys(content: RecordDict, context: Context, cfg: Config) -> RecordDict:
    """The ``keys`` request: fresh key pairs for this node's next session, public halves back."""
    node, rnd, session = sc.head(content)
    maybe_fail(cfg, rnd, node, "advertise")
    c_pk, s_pk = _new_keys(context, node)
    return sc.encode_keys(Keys(node, rnd, session, c_pk, s_pk))


def start(cfg: Config, context: Context, node: int, rnd: int, plan: ConfigRecord, setup: sc.Setup,
          delta: np.ndarray, env_steps: int, metrics: dict[str, float], privacy: PrivacyPlan | None = None,
          ) -> RecordDict:
    """Encode the trained update, open the session and return its encrypted shares.

    ``plan`` carries the node's own public keys as the server routes them and its neighbours'
    keys; a mismatch with the keys this node advertised is refused. Under distributed DP
    (``privacy.dist``) the update, already clipped, is scaled, rounded and noised by the node
    (``SkellamCoding``) instead of quantized, and weighs 1 like every node's; under central DP the
    update, clipped by the node, is quantized and weighs 1 (the server noises the sum).
    """
    dist = privacy.dist if privacy is not None else None
    need = dist.bits if dist is not None else required_ring_bits(cfg.compression.bits, len(setup.nodes))
    if setup.bits < need or (dist is not None and setup.bits != need):
        raise WireError(f"the server asks for a {setup.bits}-bit ring; {len(setup.nodes)} nodes need {need}")
    if setup.length != delta.size + 1:
        raise WireError(f"the server expects {setup.length} ring elements, this update has {delta.size + 1}")
    own, neighbours = sc.get_keys(plan)
    c_sk, s_sk = _take_keys(context, node)
    if (KeyPair.from_private(c_sk).public, KeyPair.from_private(s_sk).public) != own:
        raise WireError(f"node {node}: the plan routes other public keys for this node than it advertised")
    params = make_params(rnd, setup.session, setup.nodes, setup.neighbors, setup.threshold, setup.bits,
                         setup.length, setup.graph_seed)
    if dist is not None:  # noise nobody else can replay (private_rng), one count for the survivors' tally
        x = np.concatenate([dist.encode(delta, private_rng()), np.ones(1, np.uint64)])
    else:  # under central DP every node weighs 1, so that one node moves the sum by at most its clip
        steps = cfg.algo.local_steps if privacy is not None and privacy.mode == "central" else env_steps
        x = RingCoding.for_config(cfg).encode(delta, steps,
                                              np.random.default_rng(derive(cfg.seed, SECAGG, rnd, node)))
    session = ClientSession.new(node, params, (c_sk, s_sk))
    session.advertise()  # the server already holds these keys
    maybe_fail(cfg, rnd, node, "advertise")
    maybe_fail(cfg, rnd, node, "share")
    cts = session.share(neighbours)
    _store(context, node, params, session, x, dist.bits if dist is not None else cfg.compression.bits)
    clear = {k: v for k, v in metrics.items()
             if k in (REPORTED_METRICS if cfg.secagg.send_metrics else PUBLIC_METRICS)} or None
    return sc.encode_ciphertexts(node, rnd, setup.session, cts, clear)


def _store(context: Context, node: int, params: Params, session: ClientSession, x: np.ndarray | None,
           code_bits: int = 16) -> None:
    arrays = {f"s.{k}": v for k, v in session.to_arrays().items()}
    arrays.update({f"p.{k}": v for k, v in params.to_arrays().items()})
    if x is not None:
        # The state travels with every stage message: keep the codes at their bit width.
        arrays["x"] = pack_ring(x, code_bits)
        arrays["x.n"] = np.asarray([x.size, code_bits], np.int64)
    context.state[f"{_KEY}{node}"] = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def _load(context: Context, content: RecordDict) -> tuple[int, Params, ClientSession, np.ndarray | None]:
    node, rnd, session_id = sc.head(content)
    key = f"{_KEY}{node}"
    rec = array_record(context.state, key)
    if rec is None:
        raise WireError(f"node {node} has no secure-aggregation session")
    arrays = {k: rec[k].numpy() for k in rec}
    params = Params.from_arrays({k[2:]: v for k, v in arrays.items() if k.startswith("p.")})
    if (params.round, params.session) != (rnd, session_id):
        raise WireError(f"node {node}: message for round {rnd} does not match the open session "
                        f"(round {params.round}); replayed or stale")
    session = ClientSession.from_arrays(node, params, {k[2:]: v for k, v in arrays.items() if k.startswith("s.")})
    if "x" not in arrays:
        return node, params, session, None
    n, code_bits = (int(v) for v in arrays["x.n"])
    return node, params, session, unpack_ring(arrays["x"], code_bits, n)


def mask(content: RecordDict, context: Context, cfg: Config) -> RecordDict:
    """The ``mask`` stage: the shares addressed to this node in, its masked input out."""
    node, params, session, x = _load(context, content)
    if x is None:
        raise WireError(f"node {node} has no encoded update to mask")
    maybe_fail(cfg, params.round, node, "mask")
    masked = session.mask(x, sc.decode_ciphertexts(content))
    _store(context, node, params, session, None)  # the plain codes are no longer needed
    return sc.encode_masked(masked, params.bits)


def unmask(content: RecordDict, context: Context, cfg: Config) -> RecordDict:
    """The ``unmask`` stage: the survivors in, the shares that remove the masks (and the public
    keys of this node's next session) out; the session's secrets are erased."""
    node, params, session, _ = _load(context, content)
    maybe_fail(cfg, params.round, node, "unmask")
    survivors, dropped = sc.decode_unmask_request(content)
    shares = session.unmask(survivors, dropped)
    del context.state[f"{_KEY}{node}"]  # the session is spent: forget its secrets
    return sc.encode_shares(node, params.round, params.session, shares, _new_keys(context, node))


STAGES = {"keys": keys, "mask": mask, "unmask": unmask}
