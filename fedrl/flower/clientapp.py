"""fedrl's ClientApp builder (the entry point ``client_app.py`` only calls it). Kept apart from
the ServerApp's so that a node imports no server-only module."""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedrl.flower.client import handle_query, handle_secure, handle_train
from fedrl.runfolder.logs import setup_logging

Handler = Callable[[Message, Context], Message]


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
