"""The pure curation rules, exhaustively over every combination of the four flags."""

from __future__ import annotations

import itertools

import pytest

from shared.curation.rules import (
    DEPRECATED_TOPIC,
    DEPRECATION_SET_BY_USER,
    KEEP_SET_BY_USER,
    MIN_MEMORY_TURNS,
    MemoryFlags,
    Refused,
    agent_curates,
    strict_include_in_memory,
    summarizer_decides,
    user_cycles,
    user_sets_state,
)

ALL_FLAGS = [MemoryFlags(*combo) for combo in itertools.product([False, True], repeat=4)]


def test_r17_the_toggle_cycles_none_promoted_deprecated_none() -> None:
    flags = MemoryFlags()
    seen = [flags.state]
    for _ in range(3):
        flags = user_cycles(flags)
        seen.append(flags.state)
    assert seen == ["none", "promoted", "deprecated", "none"]


@pytest.mark.parametrize("flags", ALL_FLAGS)
@pytest.mark.parametrize("state", ["none", "promoted", "deprecated"])
def test_r20_any_user_choice_is_the_users_and_lands_exactly(flags: MemoryFlags, state: str) -> None:
    after = user_sets_state(flags, state)  # type: ignore[arg-type]
    assert after.state == state
    assert after.keep_manually_set


@pytest.mark.parametrize("flags", ALL_FLAGS)
@pytest.mark.parametrize("state", ["none", "promoted", "deprecated"])
def test_r21_every_user_choice_sets_both_manual_flags(flags: MemoryFlags, state: str) -> None:
    after = user_sets_state(flags, state)  # type: ignore[arg-type]
    assert after.keep_manually_set and after.deprecated_manually_set


@pytest.mark.parametrize("flags", ALL_FLAGS)
@pytest.mark.parametrize(
    ("state", "refusals"),
    [
        ("promoted", {"demote": KEEP_SET_BY_USER, "deprecate": DEPRECATION_SET_BY_USER}),
        ("none", {"promote": KEEP_SET_BY_USER, "deprecate": DEPRECATION_SET_BY_USER}),
        ("deprecated", {"promote": KEEP_SET_BY_USER, "demote": KEEP_SET_BY_USER}),
    ],
)
def test_r21_after_a_user_choice_the_agent_can_move_the_topic_nowhere(
    flags: MemoryFlags, state: str, refusals: dict[str, str]
) -> None:
    """R21's decision: after the user's `promoted` the agent's deprecate is refused too."""
    chosen = user_sets_state(flags, state)  # type: ignore[arg-type]
    for action, sentence in refusals.items():
        assert agent_curates(chosen, action) == Refused(sentence)  # type: ignore[arg-type]
    assert DEPRECATION_SET_BY_USER == (
        "deprecation was set manually by the user; the agent cannot override it."
    )


@pytest.mark.parametrize("flags", [f for f in ALL_FLAGS if f.keep_manually_set])
@pytest.mark.parametrize("action", ["promote", "demote"])
def test_r20_agent_cannot_override_user_keep(flags: MemoryFlags, action: str) -> None:
    outcome = agent_curates(flags, action)  # type: ignore[arg-type]
    assert outcome == Refused(KEEP_SET_BY_USER)
    assert KEEP_SET_BY_USER == (
        "keepInMemory was set manually by the user; the agent cannot override it."
    )


@pytest.mark.parametrize("flags", [f for f in ALL_FLAGS if f.deprecated_manually_set])
def test_r21_agent_cannot_deprecate_after_the_user_decided(flags: MemoryFlags) -> None:
    assert agent_curates(flags, "deprecate") == Refused(DEPRECATION_SET_BY_USER)


@pytest.mark.parametrize("flags", ALL_FLAGS)
@pytest.mark.parametrize("action", ["promote", "demote", "deprecate"])
def test_r19_no_agent_action_ever_undeprecates(flags: MemoryFlags, action: str) -> None:
    outcome = agent_curates(flags, action)  # type: ignore[arg-type]
    if isinstance(outcome, MemoryFlags):
        assert outcome.deprecated >= flags.deprecated
        # ...and the agent never touches the user's marks.
        assert outcome.keep_manually_set == flags.keep_manually_set
        assert outcome.deprecated_manually_set == flags.deprecated_manually_set


def test_r19_agent_curates_freely_until_a_human_decides() -> None:
    fresh = MemoryFlags()
    promoted = agent_curates(fresh, "promote")
    assert isinstance(promoted, MemoryFlags) and promoted.state == "promoted"
    demoted = agent_curates(promoted, "demote")
    assert isinstance(demoted, MemoryFlags) and demoted.state == "none"
    deprecated = agent_curates(fresh, "deprecate")
    assert isinstance(deprecated, MemoryFlags) and deprecated.state == "deprecated"
    assert isinstance(agent_curates(deprecated, "promote"), Refused)


@pytest.mark.parametrize(
    "flags", [f for f in ALL_FLAGS if f.deprecated and not f.keep_manually_set]
)
def test_r19_agent_cannot_promote_a_deprecated_topic(flags: MemoryFlags) -> None:
    """Promoting would bring a topic the agent cannot un-deprecate back into memory."""
    assert agent_curates(flags, "promote") == Refused(
        "the topic is deprecated; only the user can un-deprecate it."
    )
    assert DEPRECATED_TOPIC == "the topic is deprecated; only the user can un-deprecate it."


@pytest.mark.parametrize(
    "answer",
    [
        {"include_in_memory": "true"},
        {"include_in_memory": 1},
        {"include_in_memory": None},
        {"include_in_memory": "yes"},
        {},
        ["include_in_memory", True],
        "include_in_memory: true",
        None,
    ],
)
def test_r13_only_a_json_boolean_true_promotes(answer: object) -> None:
    assert strict_include_in_memory(answer) is False
    assert strict_include_in_memory({"include_in_memory": True}) is True


@pytest.mark.parametrize("count", range(0, 12))
def test_r12_short_topics_never_promoted(count: int) -> None:
    after = summarizer_decides(MemoryFlags(), include_in_memory=True, message_count=count)
    assert after.keep is (count >= MIN_MEMORY_TURNS)
    assert MIN_MEMORY_TURNS == 5


@pytest.mark.parametrize("flags", [f for f in ALL_FLAGS if f.keep_manually_set])
@pytest.mark.parametrize("include", [False, True])
def test_r20_summarization_never_changes_a_users_keep(flags: MemoryFlags, include: bool) -> None:
    assert summarizer_decides(flags, include_in_memory=include, message_count=50) == flags


@pytest.mark.parametrize("flags", [f for f in ALL_FLAGS if not f.keep_manually_set])
def test_r11_summarization_promotes_and_demotes_on_its_own(flags: MemoryFlags) -> None:
    assert summarizer_decides(flags, include_in_memory=True, message_count=5).keep
    assert not summarizer_decides(flags, include_in_memory=False, message_count=5).keep
    # Deprecation is never the summarizer's to change.
    assert summarizer_decides(flags, include_in_memory=True, message_count=5).deprecated == (
        flags.deprecated
    )
