"""Approximate token counts: about four characters a token for English text.

Budgets (R16) and the context's per-layer counts need an estimate that is cheap and
stable, not a provider's exact tokenizer.
"""

from __future__ import annotations

CHARS_PER_TOKEN = 4


def approx_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)  # ceiling division
