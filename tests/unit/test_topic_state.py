import pytest

from shared.topics.models import Topic


@pytest.mark.parametrize(
    ("keep", "deprecated", "state"),
    [
        (False, False, "none"),
        (True, False, "promoted"),
        (False, True, "deprecated"),
        (True, True, "deprecated"),
    ],
)
def test_r17_memory_state_is_derived_from_the_flags(
    keep: bool, deprecated: bool, state: str
) -> None:
    assert Topic(keep_in_memory=keep, deprecated=deprecated).memory_state == state


def test_a_topic_without_messages_has_no_pending_summary() -> None:
    assert not Topic(last_message_id=None, summarized_through_id=None).summary_pending
    assert Topic(last_message_id=7, summarized_through_id=None).summary_pending
    assert Topic(last_message_id=9, summarized_through_id=7).summary_pending
    assert not Topic(last_message_id=9, summarized_through_id=9).summary_pending
