"""Lifecycle triggers: heartbeat, debounced exit triggers, the hasEvaluated guard (R26–R29)."""
