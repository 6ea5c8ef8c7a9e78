"""Builders for fedrl's ServerApp and ClientApp (the entry points only call these)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedrl.errors import ConfigError
from fedrl.flower.client import handle_query, handle_secure, handle_train
from fedrl.flower.server_loop import run
from fedrl.logs import setup_logging
from fedrl.validate import check, config_warnings

log = logging.getLogger("fedrl")

Handler = Callable[[Message, Context], Message]


def make_server_app() -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        setup_logging()
        cfg = check(context.run_config)  # fails before round 1 on any bad key or value
        for warning in config_warnings(cfg):
            log.warning("%s", warning)
        try:
            run(grid, cfg)
        except ConfigError as err:  # e.g. a checkpoint that does not fit (RunFileError): say it in one line
            log.error("run refused: %s", err)
            raise

    return app


def make_client_app(train: Handler = handle_train) -> ClientApp:
    """``train`` is replaceable so tests can run a real misbehaving node."""
    setup_logging()  # node-side events (a state file resumed or refused) reach the SuperNode's log
    app = ClientApp()

    @app.train()
    def _train(msg: Message, context: Context) -> Message:
        return train(msg, context)

    @app.query()
    def _query(msg: Message, context: Context) -> Message:
        return handle_query(msg, context)

    # Secure aggregation's later stages (fedrl.flower.secure_codec: "train.secagg_<stage>").
    keys, mask, unmask = handle_secure("keys"), handle_secure("mask"), handle_secure("unmask")
    app.train("secagg_keys")(keys)
    app.train("secagg_mask")(mask)
    app.train("secagg_unmask")(unmask)

    return app
