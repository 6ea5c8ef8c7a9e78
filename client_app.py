"""Flower ClientApp entry point: one logical node's local round (see fedrl.flower.client)."""

from fedrl.flower.clientapp import make_client_app

app = make_client_app()
