"""Flower ClientApp: one logical node's local round (fedrl.flower.client)."""

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedrl.flower.client import handle_query, handle_train

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    return handle_train(msg, context)


@app.query()
def query(msg: Message, context: Context) -> Message:
    return handle_query(msg, context)
