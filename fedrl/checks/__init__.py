"""Checks a run passes before round 1: every variant built and stepped (``envs``), sizes and budgets (``settings``), and ``validate``, which runs them all with the config's own."""
