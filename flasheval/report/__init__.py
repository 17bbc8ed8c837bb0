"""Report rendering: figures and tables built from run-record payloads."""
