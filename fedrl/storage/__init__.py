"""What fedrl writes to disk and reads back: atomic, link-safe writes (``atomic``), ``.npz`` checkpoints with checked headers (``checkpoint``), a node's state on disk (``durable``)."""
