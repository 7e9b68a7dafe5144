"""Integration tests: sessions, messages and the one active topic (R4, R6)."""
