"""Integration tests: the OpenAI provider and the fleet-wide rate limit."""
