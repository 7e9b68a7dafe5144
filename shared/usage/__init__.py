"""Per-org accounting of LLM calls: one row per call a worker made, and the org's totals."""
