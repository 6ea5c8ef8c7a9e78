"""Flower ServerApp entry point: fedrl's federation loop (see fedrl.flower.server_loop)."""

from fedrl.flower.serverapp import make_server_app

app = make_server_app()
