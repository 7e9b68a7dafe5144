"""Integration tests: the HTTP edge: bad input, limits, health, OpenAPI, console, event streams."""
