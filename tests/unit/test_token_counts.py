"""A server's reported token counts, as accounting takes them (shared/llm/base.py): a
whole number from 0 to MAX_CALL_TOKENS, whatever the server sent."""

from __future__ import annotations

import pytest

from shared.llm.base import MAX_CALL_TOKENS, Usage


@pytest.mark.parametrize(
    ("reported", "counted"),
    [
        (120, 120),
        (0, 0),
        (-5, 0),
        (2_000_000_000, MAX_CALL_TOKENS),
        (2**70, MAX_CALL_TOKENS),
        (12.9, 12),
        (float("inf"), 0),
        (float("nan"), 0),
        ("lots", 0),
        (None, 0),
        (True, 0),
    ],
)
def test_a_reported_count_is_clamped_to_a_sane_whole_number_41(
    reported: object, counted: int
) -> None:
    assert Usage.reported(reported, reported) == Usage(counted, counted)
