"""Per-topic notes: the agent's scratchpad for the current line of work (R23, R24)."""
