"""ClientApp of the latency benchmark: answers every ``train`` message at once with an empty RecordDict.

Imports only flwr (no torch, no fedrl), so what a round costs is Flower's own floor.
"""

from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Reply at once with empty content."""
    return Message(RecordDict(), reply_to=msg)
