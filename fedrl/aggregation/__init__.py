"""Server-side aggregation of client updates (plain numpy, no Flower)."""
