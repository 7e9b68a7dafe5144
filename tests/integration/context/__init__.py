"""Integration tests: the assembled context stack (R1-R3)."""
