"""The context stack an agent consumes every turn, ordered for prompt-cache hits (R1–R3)."""
