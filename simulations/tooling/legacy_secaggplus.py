"""Reference runs of Flower's own legacy SecAgg+ (and plain legacy FedAvg) on given client vectors.

fedrl has its own secure aggregation; this module runs Flower 1.42's implementation *for real*
on the same inputs so the two can be cross-checked and benchmarked side by side:

* server: a legacy ``ServerApp`` whose main runs ``DefaultWorkflow`` for one round with
  ``fit_workflow=SecAggPlusWorkflow(...)`` (or Flower's ``default_fit_workflow`` when
  ``secure=False``) and the legacy ``FedAvg`` strategy over a ``LegacyContext``;
* clients: a legacy ``ClientApp(client_fn=..., mods=[secaggplus_mod])`` (no mod when
  ``secure=False``) whose ``NumPyClient.fit`` returns ``inputs[i]`` with ``num_examples = weights[i]``;
* engine: ``flwr.simulation.run_simulation`` with the Ray backend (the Simulation Runtime:
  ``InMemoryGrid`` + link state + Ray actor pool). Each call starts and shuts down Ray.

Flower's workflow, mod, strategy and transport run unchanged. The only glue is ``_MeteredGrid``:
a delegating ``Grid`` handed to the workflow that times each ``send_and_receive`` and measures the
content of the messages going to the nodes (``bytes_down``) and of the replies (``bytes_up``) with
fedrl's wire convention (deflated bytes of every object in the content's object tree; see
``fedrl.flower.codec.wire_bytes``). Only the fit round is metered; engine start, node registration,
parameter initialisation and Ray shutdown are outside ``seconds``.

What Flower's SecAgg+ returns (read from ``secaggplus_mod``/``SecAggPlusWorkflow`` and checked by
tests/component/test_legacy_secaggplus.py): the **weighted mean** of the client vectors, not the
sum. Each client scales its vector by ``d_i = round(w_i / max_weight * Q) / Q`` (``w_i`` its
``num_examples``, ``Q = quantization_range``), clips the scaled values to ``[-C, C]``
(``C = clipping_range``), quantizes them stochastically to integers in ``[0, Q]``, prepends the
integer ``round(d_i * Q)``, masks and uploads. The server unmasks the sum, dequantizes it and
divides by ``sum(d_i)``, so the result is ``sum(d_i * x_i) / sum(d_i)``; the legacy ``FedAvg``
strategy then averages identical copies of it, a no-op. Consequences:

* with equal weights it is the plain mean; with unequal weights it is the mean weighted by the
  quantized ``d_i`` (relative weight error up to ``0.5 / (w_i / max_weight * Q)``);
* per element, the quantization error is below ``n * (2C/Q) / sum(d_i)``; with equal weights that
  is ``2C / (Q * d)``: about 3.8e-3 at Flower's defaults (``max_weight=1000``, ``w=1``), 3.8e-6
  with ``max_weight=1`` (stochastic rounding is unbiased, so typical errors are far smaller);
* the clip applies to ``d_i * x_i``, so values are clipped at ``C / d_i`` (8000 at the defaults);
* the sum of the quantized values must stay below ``modulus_range``, i.e. roughly ``n * Q < M``;
* the aggregate is float64 (dequantization works in float64); the plain FedAvg path returns the
  clients' dtype (float32 inputs give float32).

The masked vector travels as int64 ``.npy`` bytes inside a ``ConfigRecord`` (8 bytes a parameter
plus one int64 for the weight factor); the mod clears the reply's ``ArrayRecord``.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.client import NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import GetPropertiesIns, ndarrays_to_parameters
from flwr.common.constant import MessageTypeLegacy
from flwr.compat.common import recorddict_compat as compat
from flwr.compat.server.typing import Workflow
from flwr.proto.node_pb2 import NodeInfo  # pylint: disable=E0611
from flwr.server import LegacyContext, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_PARAMS_RECORD
from flwr.server.workflow.default_workflows import default_fit_workflow
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
from flwr.supercore.run import Run

PARTITION_ID = "partition-id"  # node_config key the Simulation Runtime sets on every node
STAGES_SECURE = ("setup", "share-keys", "collect-masked-vectors", "unmask")


@dataclass(frozen=True)
class StageTraffic:
    """One ``send_and_receive`` of the fit round: Flower's stage name, wall time and bytes."""

    name: str
    seconds: float
    bytes_up: int  # replies, summed over nodes
    bytes_down: int  # instructions, summed over nodes
    messages: int  # instructions sent (= nodes addressed)


@dataclass(frozen=True)
class LegacyResult:
    """What one metered round of Flower's legacy SecAgg+ (or plain FedAvg) produced.

    ``aggregate``: Flower's aggregated parameters as its workflow stores them: the weighted mean of
    the client vectors (weights ``num_examples``), float64 with SecAgg+, the inputs' dtype without.
    ``seconds``: wall time of the fit round (all SecAgg+ stages, client work, transport and
    server-side unmasking), minus the time spent measuring bytes; engine startup excluded.
    ``bytes_up``/``bytes_down``: serialized message content sent by / to the clients in the round.
    ``startup_seconds``: wall time of the whole ``run_simulation`` call minus ``seconds``.
    """

    aggregate: list[np.ndarray]
    seconds: float
    bytes_up: int
    bytes_down: int
    stages: tuple[StageTraffic, ...] = ()
    startup_seconds: float = 0.0


def content_bytes(content: RecordDict) -> int:
    """fedrl's wire convention (``codec.wire_bytes``) applied to a message's content."""
    return sum(len(obj.deflate()) for obj in get_all_nested_objects(content).values())


class _MeteredGrid(Grid):
    """Delegates to the runtime's Grid; meters ``send_and_receive`` while ``recording`` is set."""

    def __init__(self, inner: Grid) -> None:
        self.inner = inner
        self.recording = False
        self.stages: list[StageTraffic] = []
        self.metering_seconds = 0.0
        self.errors: list[str] = []  # error replies (a node's ClientApp raised) while recording

    def set_run(self, run: Run) -> None:
        self.inner.set_run(run)

    @property
    def run(self) -> Run:
        return self.inner.run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return self.inner.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.inner.get_node_ids()

    def get_nodes(self) -> Iterable[NodeInfo]:
        return self.inner.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.inner.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.inner.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        if not self.recording:
            return self.inner.send_and_receive(messages, timeout=timeout)
        out = list(messages)
        t0 = time.perf_counter()
        down = sum(content_bytes(m.content) for m in out)
        t1 = time.perf_counter()
        replies = list(self.inner.send_and_receive(out, timeout=timeout))
        t2 = time.perf_counter()
        up = sum(content_bytes(m.content) for m in replies if m.has_content())
        self.errors += [str(m.error) for m in replies if m.has_error()]
        t3 = time.perf_counter()
        self.metering_seconds += (t1 - t0) + (t3 - t2)
        self.stages.append(StageTraffic("", t2 - t1, up, down, len(out)))
        return replies


class _ReturnInputs(NumPyClient):
    def __init__(self, arrays: list[np.ndarray], weight: int) -> None:
        self.arrays = arrays
        self.weight = weight

    def fit(self, parameters: list[np.ndarray], config: dict[str, Any]) -> tuple[list[np.ndarray], int, dict[str, Any]]:
        return self.arrays, self.weight, {}


@dataclass(frozen=True)
class _ClientFn:
    """Picklable client_fn (Ray ships the ClientApp with every message): loads node i's inputs from disk."""

    folder: str
    weights: tuple[int, ...]

    def __call__(self, context: Context) -> Any:
        i = int(context.node_config[PARTITION_ID])
        with np.load(Path(self.folder) / f"{i}.npz", allow_pickle=False) as z:
            arrays = [z[f"arr_{k}"] for k in range(len(z.files))]
        return _ReturnInputs(arrays, self.weights[i]).to_client()


@dataclass
class _Outcome:
    aggregate: list[np.ndarray] = field(default_factory=list)
    seconds: float = 0.0
    stages: list[StageTraffic] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    aggregated: bool = False  # the workflow replaced the global parameters (SecAgg+ did not halt)


def _warm_up(grid: Grid, n: int, timeout: float = 120.0) -> None:
    """Wait for all ``n`` nodes, then an unmetered ``get_properties`` to each: the Ray actors and
    node contexts exist before the round is timed (the ServerApp starts before the engine does)."""
    deadline = time.monotonic() + timeout
    while len(nids := list(grid.get_node_ids())) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(nids)} of {n} nodes registered after {timeout:.0f} s")
        time.sleep(0.05)
    replies = grid.send_and_receive([Message(content=compat.getpropertiesins_to_recorddict(GetPropertiesIns({})),
                                             dst_node_id=nid, message_type=MessageTypeLegacy.GET_PROPERTIES,
                                             group_id="warm-up") for nid in nids])
    errors = [m.error for m in replies if m.has_error()]
    if errors:
        raise RuntimeError(f"warm-up failed: {errors[0]}")


def _no_evaluation(grid: Grid, context: Context) -> None:
    """Evaluate workflow: none (the benchmark is the fit round alone)."""


@contextmanager
def _quiet() -> Iterator[None]:
    """Silence Flower's console logging (deprecation notices, per-stage INFO) for the call."""
    logger = logging.getLogger("flwr")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _server_app(n: int, shapes: list[np.ndarray], fit: Workflow, out: _Outcome) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=n, min_evaluate_clients=0,
                          min_available_clients=n,
                          initial_parameters=ndarrays_to_parameters([np.zeros_like(a) for a in shapes]))
        lctx = LegacyContext(context, config=ServerConfig(num_rounds=1), strategy=strategy)
        metered = _MeteredGrid(grid)
        initial: ArrayRecord | None = None

        def record_initial(g: Grid, c: Context) -> None:  # DefaultWorkflow sets MAIN_PARAMS_RECORD first
            nonlocal initial
            initial = lctx.state.array_records[MAIN_PARAMS_RECORD]
            timed_fit(g, c)

        def timed_fit(g: Grid, c: Context) -> None:
            _warm_up(g, n)
            metered.recording = True
            t0 = time.perf_counter()
            try:
                fit(g, c)
            finally:
                out.seconds = time.perf_counter() - t0 - metered.metering_seconds
                metered.recording = False
                out.stages = list(metered.stages)
                out.errors = list(metered.errors)

        DefaultWorkflow(fit_workflow=record_initial, evaluate_workflow=_no_evaluation)(metered, lctx)
        final = lctx.state.array_records[MAIN_PARAMS_RECORD]
        out.aggregated = final is not initial
        out.aggregate = final.to_numpy_ndarrays()

    return app


_RUN_LOCK = threading.Lock()  # one Ray cluster per process: calls must not overlap


def run_flower_secaggplus(
    inputs: Sequence[Sequence[np.ndarray]],
    *,
    num_shares: int | float,  # noqa: PYI041 (Flower reads an int as a count, a float as a fraction)
    reconstruction_threshold: int | float,  # noqa: PYI041 (likewise)
    clipping_range: float = 8.0,
    quantization_range: int = 4194304,
    modulus_range: int = 4294967296,
    secure: bool = True,
    weights: Sequence[int] | None = None,
    max_weight: float = 1000.0,
    client_cpus: float = 1.0,
) -> LegacyResult:
    """One fit round of Flower's legacy SecAgg+ (``secure=False``: plain legacy FedAvg) on ``inputs``.

    Node ``i`` returns ``inputs[i]`` with ``num_examples = weights[i]`` (default 1). The SecAgg+
    arguments are passed to ``SecAggPlusWorkflow`` unchanged (``max_weight`` too; see the module
    docstring for how it trades range for precision). ``client_cpus`` is the Ray resource per
    ClientApp (1.0 on 2 cores: two ClientApps run in parallel). Raises ``RuntimeError`` when the
    round does not complete (e.g. Flower halts SecAgg+ for too few shares).
    """
    n = len(inputs)
    if n < 2:
        raise ValueError("SecAgg+ needs at least 2 clients")
    first = [np.asarray(a) for a in inputs[0]]
    for i, arrs in enumerate(inputs):
        if [np.shape(a) for a in arrs] != [a.shape for a in first]:
            raise ValueError(f"client {i}: array shapes differ from client 0's")
    w = tuple(int(x) for x in weights) if weights is not None else (1,) * n
    if len(w) != n or min(w) < 1:
        raise ValueError("weights: one positive int per client")

    fit: Workflow = (SecAggPlusWorkflow(num_shares, reconstruction_threshold, max_weight=max_weight,
                                        clipping_range=clipping_range, quantization_range=quantization_range,
                                        modulus_range=modulus_range)
                     if secure else default_fit_workflow)
    out = _Outcome()
    backend_config: dict[str, Any] = {
        "client_resources": {"num_cpus": client_cpus, "num_gpus": 0.0},
        "init_args": {"logging_level": "ERROR", "log_to_driver": False, "include_dashboard": False,
                      "configure_logging": True},
    }
    with tempfile.TemporaryDirectory(prefix="fedrl-secagg-") as folder, _RUN_LOCK, _quiet():
        for i, arrs in enumerate(inputs):
            np.savez(Path(folder) / f"{i}.npz", *[np.asarray(a) for a in arrs])
        client_app = ClientApp(client_fn=_ClientFn(folder, w), mods=[secaggplus_mod] if secure else None)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # Ray's note on accelerator env vars
            run_simulation(server_app=_server_app(n, first, fit, out), client_app=client_app, num_supernodes=n,
                           backend_config=backend_config)
        total = time.perf_counter() - t0

    if out.errors:
        raise RuntimeError(f"{len(out.errors)} ClientApp error(s) in Flower's round, first: {out.errors[0]}")
    if not out.aggregated:
        raise RuntimeError("Flower's round did not aggregate (SecAgg+ halted? see Flower's log)")
    names = STAGES_SECURE if secure else ("fit",)
    stages = tuple(StageTraffic(names[k] if k < len(names) else f"stage{k}", s.seconds, s.bytes_up, s.bytes_down,
                                s.messages) for k, s in enumerate(out.stages))
    return LegacyResult(aggregate=out.aggregate, seconds=out.seconds,
                        bytes_up=sum(s.bytes_up for s in stages), bytes_down=sum(s.bytes_down for s in stages),
                        stages=stages, startup_seconds=total - out.seconds)
