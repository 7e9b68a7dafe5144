"""Integration tests: summaries and evaluations (R9-R14, R24, R25, R30)."""
