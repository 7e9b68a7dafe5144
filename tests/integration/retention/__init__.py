"""Integration tests: retention of idle sessions."""
