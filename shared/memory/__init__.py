"""Cross-session memory: the block of promoted (and deprecated) topics of a scope (R11, R15–R18)."""
