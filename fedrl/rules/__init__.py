"""Server rules behind one interface (``base.ServerRule``), registered by name (``registry``)."""
