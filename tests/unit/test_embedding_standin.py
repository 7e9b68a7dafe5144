"""The test stand-in's embedding (tests/embedding_standin.py): unit vectors, the same for
the same words whatever their case or punctuation, closer the more words are shared."""

from __future__ import annotations

import math

import pytest

from tests.embedding_standin import DIMENSIONS, cosine, embedding


@pytest.mark.parametrize("text", ["Postgres for billing", "a", "", "¿qué?", "x x x"])
def test_every_vector_is_of_unit_length_and_the_asked_size(text: str) -> None:
    for dimensions in (DIMENSIONS, 8, 1536):
        vector = embedding(text, dimensions)
        assert len(vector) == dimensions
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0)


def test_case_and_punctuation_do_not_matter_and_word_order_does_not_either() -> None:
    assert embedding("Postgres, for BILLING!") == embedding("billing for postgres")


def test_texts_sharing_words_are_closer_than_texts_that_share_none() -> None:
    query = embedding("which database for billing")
    assert cosine(query, embedding("billing runs on the postgres database")) > 0.3
    assert cosine(query, embedding("billing runs on the postgres database")) > cosine(
        query, embedding("a picnic in the park")
    )
    assert embedding("billing") != embedding("picnic")
