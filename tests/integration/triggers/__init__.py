"""Integration tests: exit triggers, debounce and the hasEvaluated guard (R26-R29)."""
