"""Integration tests: per-org limits."""
