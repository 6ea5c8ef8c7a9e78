"""fedrl: federated reinforcement learning on Flower."""

__version__ = "0.1.0"
