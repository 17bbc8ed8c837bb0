"""Sweeps: many checkpoints placed under one budget, their run folder, pool, stores and records."""
