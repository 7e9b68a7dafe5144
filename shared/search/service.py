"""Search of one scope's topics and messages (GET /agents-api/search, the `recall` tool).

Nothing here enters a prompt by itself: it answers the agent that asks (the bounded
context stays bounded, R2 and R16). How hits are found and ranked by their words:
shared/search/ranking.py. With embeddings on (DRIFTLESS_EMBEDDINGS) and the scope's
vectors in pgvector, a search is hybrid: the query's vector (embedded under a short
deadline, shared/embeddings/query.py) finds the scope's nearest messages and topics
(shared/search/meaning.py), and the two rankings are fused (shared/search/fusion.py).
Whenever the vector is missing (no embeddings, no pgvector, a slow or failing provider)
the answer is the lexical one, and says so: `mode`.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from sqlalchemy import Connection
from sqlalchemy.engine import Row

from shared.domain.errors import Invalid
from shared.embeddings.store import stored_dimensions, vector_literal, vectors_available
from shared.infra.db.uow import UnitOfWork
from shared.memory.scope import Scope
from shared.search import fusion, meaning, ranking
from shared.search.admission import search_slot
from shared.topics.models import memory_state

Kind = Literal["topic", "message"]
KINDS: tuple[Kind, ...] = ("topic", "message")
Mode = Literal["lexical", "hybrid"]
Key = tuple[str, object]  # a hit's kind and its message's or topic's id
# How many of the words' best messages and topics a hybrid search fuses with the nearest
# (meaning.NEAREST): the z-scores are over all of them (LoCoMo dev, recall@10: 0.744 with
# 20 a side, 0.773 with 100, 0.777 with 200, 0.774 with 1,000; docs/benchmarks.md).
WORDS_POOL = 200
MAX_QUERY_CHARS = 1000
MAX_LIMIT = 50
DEFAULT_LIMIT = 10


@dataclass(frozen=True)
class SearchQuery:
    scope: Scope
    q: str
    limit: int = DEFAULT_LIMIT
    kind: Kind | None = None  # None: both, best first
    include_deprecated: bool = False


@dataclass(frozen=True)
class Hit:
    kind: Kind
    topic_id: uuid.UUID
    session_id: uuid.UUID
    message_id: int | None  # None for a topic
    title: str | None
    snippet: str
    memory_state: str
    score: float
    created_at: dt.datetime


def hit_json(hit: Hit) -> dict[str, Any]:
    """A hit as the API answers it (camelCase), for the recall tool's stored result."""
    return {
        "kind": hit.kind,
        "topicId": str(hit.topic_id),
        "sessionId": str(hit.session_id),
        "messageId": hit.message_id,
        "title": hit.title,
        "snippet": hit.snippet,
        "memoryState": hit.memory_state,
        "score": hit.score,
        # As the API writes it (pydantic): UTC with a Z.
        "createdAt": hit.created_at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
    }


@dataclass(frozen=True)
class Found:
    """A search's hits, best first, and how they were found."""

    hits: list[Hit]
    mode: Mode


class QueryVectors(Protocol):
    """What a hybrid search needs of the embeddings (shared/embeddings/query.py)."""

    @property
    def model(self) -> str: ...

    def vector(
        self, text: str, *, org_id: uuid.UUID | None, dimensions: int | None = None
    ) -> list[float] | None: ...


def checked(query: SearchQuery) -> SearchQuery:
    """The query, or Invalid naming what is wrong with it."""
    if not query.q.strip():
        raise Invalid("q: must not be empty")
    if len(query.q) > MAX_QUERY_CHARS:
        raise Invalid(f"q: at most {MAX_QUERY_CHARS} characters")
    if "\x00" in query.q:
        raise Invalid("q: must not contain NUL characters")
    if not 1 <= query.limit <= MAX_LIMIT:
        raise Invalid(f"limit: must be between 1 and {MAX_LIMIT}")
    if query.kind is not None and query.kind not in KINDS:
        raise Invalid(f"kind: must be one of {', '.join(KINDS)}")
    return query


def search(*, uow: UnitOfWork, query: SearchQuery, vectors: QueryVectors | None = None) -> Found:
    """The scope's best matches first; none when the query has no searchable word (only
    stop-words or punctuation) and no vector. Hybrid with `vectors` and the scope's
    vectors stored, else lexical. TooBusy while the org runs its limit of searches
    (shared/search/admission.py)."""
    query = checked(query)
    with search_slot(uow=uow, org_id=query.scope.org_id):  # TooBusy past the org's cap
        vector = _query_vector(uow, query, vectors)
        params = _params(query)
        if vector is None or vectors is None:
            rows = uow.connection().execute(ranking.SEARCH, params)
            return Found([_hit(row) for row in rows], "lexical")
        return Found(_hybrid(uow, query, params, vector, vectors.model), "hybrid")


def _hybrid(
    uow: UnitOfWork, query: SearchQuery, params: dict[str, Any], vector: list[float], model: str
) -> list[Hit]:
    """Each side's best (WORDS_POOL, meaning.NEAREST), every candidate's scores on both
    sides, fused; the query's limit of them, as hits. The nearest are found beside the
    words' best (on another connection when the pool has one to give: meaning.beside)."""
    connection = uow.connection()
    hybrid = {**params, "limit": WORDS_POOL, "model": model, "vector": vector_literal(vector)}
    with meaning.beside(connection, params=params, vector=vector, model=model) as nearest:
        scored = connection.execute(ranking.scores(len(vector)), hybrid).all()
        near = nearest()
    cosines: dict[Key, float | None] = {_key(row): float(row.score) for row in near}
    words: dict[Key, float] = {}
    around: dict[Key, fusion.Around] = {}
    for row in _candidates(connection, hybrid, scored, cosines, len(vector)):
        key = _key(row)
        words[key] = float(row.score)
        if row.kind == "message":  # every message candidate, with its exact cosine
            cosines[key] = None if row.cosine is None else float(row.cosine)
            around[key] = fusion.Around(
                words=float(row.around_words), turns=int(row.turns),
                meaning=float(row.around_meaning), embedded=int(row.embedded),
            )  # fmt: skip
    unmeasured = [key[1] for key in words if key not in cosines]  # topics the words found
    found = meaning.topic_similarities(
        connection=connection, topic_ids=unmeasured, vector=vector, model=model
    )
    cosines.update({("topic", topic_id): cosine for topic_id, cosine in found.items()})
    fused = fusion.fuse(words, cosines, limit=query.limit, around=around)
    return _hits(connection, params, fused)


def _candidates(
    connection: Connection, hybrid: dict[str, Any], scored: Sequence[Row[Any]],
    cosines: dict[Key, float | None], dimensions: int,
) -> list[Row[Any]]:  # fmt: skip
    """The words' candidates (`scored`, less its words' weights) and the nearest messages
    they did not bring, scored by the same words and weights: one a query's name or place
    matches without being among the words' best would otherwise count as matching
    nothing (LoCoMo dev, recall@10: 0.746 without, 0.777 with)."""
    weights = [row for row in scored if row.kind == "word"]
    candidates = [row for row in scored if row.kind != "word"]
    brought = {_key(row) for row in candidates}
    unscored = [key[1] for key in cosines if key[0] == "message" and key not in brought]
    if unscored:
        candidates += connection.execute(
            ranking.scores_of(dimensions),
            {**hybrid, "ids": unscored, "limit": len(unscored),
             "words": [row.word for row in weights], "idfs": [row.score for row in weights]},
        ).all()  # fmt: skip
    return candidates


def _hits(
    connection: Connection, params: dict[str, Any], fused: Sequence[fusion.Fused[Key]]
) -> list[Hit]:
    """The fused candidates as hits, read with their snippets (only these few)."""
    rows = connection.execute(
        ranking.HITS,
        {
            **params,
            "message_ids": [f.key[1] for f in fused if f.key[0] == "message"],
            "topic_ids": [f.key[1] for f in fused if f.key[0] == "topic"],
        },
    )
    dressed = {_key(row): row for row in rows}
    # A hit whose row went meanwhile (erased by another transaction) is left out.
    return [_hit(dressed[f.key], score=f.score) for f in fused if f.key in dressed]


def _query_vector(
    uow: UnitOfWork, query: SearchQuery, vectors: QueryVectors | None
) -> list[float] | None:
    """The query's vector, if this search can use one: of the size of the model's stored
    vectors (a vector of another size would fail the statements, not the search: lexical).
    No database work before it but the once-a-process checks: the vector tables exist, the
    model's vectors' size."""
    if vectors is None or not vectors_available(uow):
        return None
    dimensions = stored_dimensions(uow=uow, model=vectors.model)
    return vectors.vector(query.q, org_id=query.scope.org_id, dimensions=dimensions)


def _params(query: SearchQuery) -> dict[str, Any]:
    return {
        "q": query.q,
        "org": query.scope.org_id,
        "agent": query.scope.agent_id,
        "user": query.scope.user_id,
        "limit": query.limit,
        "messages": query.kind in (None, "message"),
        "topics": query.kind in (None, "topic"),
        "deprecated": query.include_deprecated,
        "common_matches": ranking.COMMON_MATCHES,
        "headline": ranking.HEADLINE,
        "whole": ranking.WHOLE_SNIPPET_CHARS,
    }


def _key(row: object) -> Key:
    r = row._mapping  # type: ignore[attr-defined]
    return (r["kind"], r["message_id"] if r["kind"] == "message" else r["topic_id"])


def _hit(row: object, *, score: float | None = None) -> Hit:
    r = row._mapping  # type: ignore[attr-defined]
    return Hit(
        kind=r["kind"],
        topic_id=r["topic_id"],
        session_id=r["session_id"],
        message_id=r["message_id"],
        title=r["title"],
        snippet=r["snippet"],
        memory_state=memory_state(keep=r["keep_in_memory"], deprecated=r["deprecated"]),
        score=round(float(r["score"] if score is None else score), 6),
        created_at=r["created_at"],
    )
