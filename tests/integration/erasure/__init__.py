"""Integration tests: user erasure."""
