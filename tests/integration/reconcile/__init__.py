"""Integration tests: the reconciler of lost work."""
