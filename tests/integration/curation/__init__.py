"""Integration tests: the user's curation over HTTP (R15, R17, R20, R21)."""
