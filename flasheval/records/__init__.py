"""The record layer: run records (every command writes one) and their payload schemas, one per kind."""
