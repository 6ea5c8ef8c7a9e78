"""Local RL algorithms behind one interface (``base.Algorithm``), registered by ``algo.name``."""

from fedrl.registry.algorithms import get, names, register, unregister

__all__ = ["get", "names", "register", "unregister"]
