"""Durable facts: one key-value document per org + agent + user (R22)."""
