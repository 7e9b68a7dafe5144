"""Integration tests: the built-in tools over HTTP and MCP (R7, R8, R19-R23)."""
