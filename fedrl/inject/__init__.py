"""Faults injected for experiments: Byzantine and hostile nodes (``attacks``), seeded dropouts (``dropout``), simulated slow nodes (``speed``)."""
