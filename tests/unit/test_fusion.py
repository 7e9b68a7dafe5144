"""The fusion of the words' and the meaning's scores (shared/search/fusion.py): z-scores
over all candidates, 0.4 words and 0.6 meaning."""

from __future__ import annotations

import pytest

from shared.search.fusion import MEANING_WEIGHT, WORDS_WEIGHT, Around, fuse


def test_the_weights_are_the_measured_ones() -> None:
    assert (WORDS_WEIGHT, MEANING_WEIGHT) == (0.4, 0.6)


def test_meaning_outweighs_words_when_each_favours_another_candidate() -> None:
    # "a" is best by words, "b" by meaning, by the same margin: meaning's weight wins.
    fused = fuse({"a": 2.0, "b": 0.0}, {"a": 0.0, "b": 1.0}, limit=2)
    assert [f.key for f in fused] == ["b", "a"]


def test_a_candidate_no_word_matches_can_top_the_list_by_its_meaning() -> None:
    words = {"w1": 1.0, "w2": 1.1, "w3": 0.9}
    meaning = {"w1": 0.2, "w2": 0.25, "w3": 0.2, "m": 0.9}
    assert fuse(words, meaning, limit=1)[0].key == "m"


def test_scores_are_z_scores_shifted_so_the_weakest_candidate_is_zero() -> None:
    fused = fuse({"a": 1.0, "b": 3.0}, {"a": 0.5, "b": 0.7}, limit=2)
    # Each side's z-scores are -1 and +1: a scores -1, b +1; shifted by 1.
    assert [(f.key, f.score) for f in fused] == [("b", pytest.approx(2.0)), ("a", 0.0)]


def test_a_candidate_without_a_vector_is_ranked_by_its_words_alone() -> None:
    fused = fuse({"a": 1.0, "b": 3.0, "c": 2.0}, {"a": 0.9, "b": None, "c": 0.1}, limit=3)
    scores = {f.key: f.score for f in fused}
    # b: the best words, meaning neither for nor against (z 0)
    assert scores["b"] > scores["c"]
    assert [f.key for f in fused][:1] == ["b"]


def test_ties_keep_the_words_order_and_the_limit_holds() -> None:
    fused = fuse({"a": 1.0, "b": 1.0}, {"a": 0.5, "b": 0.5, "c": 0.5}, limit=2)
    assert [f.key for f in fused] == ["a", "b"]


def test_nothing_in_nothing_out() -> None:
    assert fuse({}, {}, limit=10) == []


def test_a_message_whose_neighbours_mean_the_query_outranks_an_equal_one_whose_do_not() -> None:
    # a and b score alike on their own; a's next turn means the query, b's does not.
    words, meaning = {"a": 1.0, "b": 1.0, "c": 0.0}, {"a": 0.5, "b": 0.5, "c": 0.3}
    around = {
        "a": Around(words=0.0, turns=1, meaning=0.9, embedded=1),
        "b": Around(words=0.0, turns=1, meaning=0.1, embedded=1),
    }
    assert [f.key for f in fuse(words, meaning, limit=2, around=around)] == ["a", "b"]
    assert [f.key for f in fuse(words, meaning, limit=2)] == ["a", "b"]  # the tie's order
    around["a"], around["b"] = around["b"], around["a"]
    assert [f.key for f in fuse(words, meaning, limit=2, around=around)] == ["b", "a"]


def test_neighbours_are_taken_on_the_candidates_scales_so_weak_ones_subtract() -> None:
    # Cosines are all positive: a neighbour below the candidates' mean must count against.
    words, meaning = {"a": 1.0, "b": 1.0}, {"a": 0.6, "b": 0.4}
    weak = {"a": Around(words=0.0, turns=2, meaning=0.4, embedded=2)}  # 0.2 each
    alone = {f.key: f.score for f in fuse(words, meaning, limit=2)}
    beside = {f.key: f.score for f in fuse(words, meaning, limit=2, around=weak)}
    # Meaning's mean 0.5, spread 0.1: a's own z +1, each neighbour's -3 (words do not
    # vary: 0). a: 0.6 × (1 + 0.3 × -6) = -0.48 against b's 0.6 × -1; alone, 0.6 and -0.6.
    assert beside["a"] - beside["b"] == pytest.approx(0.6 * (1 + 0.3 * -6) - 0.6 * -1)
    assert alone["a"] - alone["b"] == pytest.approx(1.2)


def test_a_neighbour_without_a_vector_counts_for_its_words_alone() -> None:
    words, meaning = {"a": 2.0, "b": 0.0}, {"a": 0.5, "b": 0.5}
    around = {"b": Around(words=2.0, turns=1, meaning=0.0, embedded=0)}
    scores = {f.key: f.score for f in fuse(words, meaning, limit=2, around=around)}
    # words' z: a +1, b -1; b's neighbour scores as a (+1) × 0.3 × 0.4; meaning no spread.
    assert scores["a"] - scores["b"] == pytest.approx(0.4 * 2 - 0.3 * 0.4 * 1)
