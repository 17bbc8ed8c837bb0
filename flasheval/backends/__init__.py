"""Model backends and scorers."""
