"""Tooling for tests and benchmarks, kept outside the runtime package ``fedrl``.

- :mod:`tooling.netlab`: Linux network namespaces joined by shaped links (delay, loss, rate),
  for deployments over slow and lossy networks;
- :mod:`tooling.legacy_secaggplus`: Flower's own legacy SecAgg+ run for real on given vectors,
  to cross-check and benchmark fedrl's secure aggregation against it;
- :mod:`tooling.secagg_round`: one whole fedrl SecAgg round run in-process (dropouts, tampering).

Imported by top-level name with ``simulations/`` on ``sys.path``: a benchmark run as
``python simulations/X.py`` has it there already, and ``tests/conftest.py`` puts it there for pytest.
"""
