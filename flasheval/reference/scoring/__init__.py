"""Scoring a model the way a reference's models were scored: the scorer protocol, live (task files, lm-eval) and replayed."""
