"""Integration tests: API keys, bearer auth and the list of authenticated routes."""
