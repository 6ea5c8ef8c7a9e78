"""Topologies beyond the star: hierarchical (client, edge, cloud) aggregation (plain numpy)."""
