"""Integration tests: the memory block, its cache and scopes (R11, R15, R16, R18, R22)."""
