"""Erasing everything driftless holds about one user of one agent (right to erasure)."""
