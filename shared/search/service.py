"""Search of one scope's topics and messages (GET /agents-api/search, the `recall` tool).

Nothing here enters a prompt by itself: it answers the agent that asks (the bounded
context stays bounded, R2 and R16).

PostgreSQL does the work. Each message and topic carries a search vector computed on
insert (English stemming; a topic's title weighs above its summary). A query's words are
OR-ed (a question's words are rarely all in the turn that answers it), and a message's
score adds to its own rank a share of its topic's (a turn of a topic about the question
counts more) and of the turns around it (a question's words are often spread over a
question and its answer). Deprecated topics (R18) and their messages are left out
unless asked for; tool messages never count (a recall's own stored results among them).
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import text

from shared.db.uow import UnitOfWork
from shared.errors import Invalid
from shared.memory.scope import Scope
from shared.topics.models import memory_state

Kind = Literal["topic", "message"]
KINDS: tuple[Kind, ...] = ("topic", "message")
MAX_QUERY_CHARS = 1000
MAX_LIMIT = 50
DEFAULT_LIMIT = 10
# A message's score: its own rank, plus these shares of its topic's rank and of the
# ranks of the NEIGHBOURS turns on each side of it in its session.
TOPIC_WEIGHT = 0.3
NEIGHBOUR_WEIGHT = 0.3
NEIGHBOURS = 2
# The best this many messages by their own and their topic's rank are re-ranked with
# their neighbours (two index probes each).
RERANKED = 200
# A snippet: the best fragment of about 12 to 30 words, plain text (no <b> markup: it is
# read by models and people alike).
HEADLINE = 'MaxWords=30, MinWords=12, MaxFragments=1, StartSel="", StopSel=""'
# A text this short is its own snippet, whole.
WHOLE_SNIPPET_CHARS = 240


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


def search(*, uow: UnitOfWork, query: SearchQuery) -> list[Hit]:
    """The scope's best matches first; an empty list when the query has no searchable
    word (only stop-words or punctuation)."""
    query = checked(query)
    params = {
        "q": query.q,
        "org": query.scope.org_id,
        "agent": query.scope.agent_id,
        "user": query.scope.user_id,
        "limit": query.limit,
        "deprecated": query.include_deprecated,
        "headline": HEADLINE,
        "whole": WHOLE_SNIPPET_CHARS,
    }
    hits: list[Hit] = []
    if query.kind in (None, "message"):
        hits += [_hit("message", row) for row in uow.connection().execute(_MESSAGES, params)]
    if query.kind in (None, "topic"):
        hits += [_hit("topic", row) for row in uow.connection().execute(_TOPICS, params)]
    hits.sort(key=lambda hit: hit.score, reverse=True)
    return hits[: query.limit]


def _hit(kind: Kind, row: object) -> Hit:
    r = row._mapping  # type: ignore[attr-defined]
    return Hit(
        kind=kind,
        topic_id=r["topic_id"],
        session_id=r["session_id"],
        message_id=r["message_id"],
        title=r["title"],
        snippet=r["snippet"],
        memory_state=memory_state(keep=r["keep_in_memory"], deprecated=r["deprecated"]),
        score=round(float(r["score"]), 6),
        created_at=r["created_at"],
    )


# The query's words, OR-ed: plainto_tsquery drops operators and stop-words (so no input
# is a syntax error) and joins the rest with &, which becomes |.
_QUERY_AND_SCOPE = """
    query AS (
        SELECT CAST(replace(CAST(plainto_tsquery('english', :q) AS text), ' & ', ' | ')
                    AS tsquery) AS q
    ),
    scope AS (
        SELECT id FROM sessions WHERE org_id = :org AND agent_id = :agent AND user_id = :user
    )
"""

_MESSAGES = text(
    f"""
    WITH {_QUERY_AND_SCOPE},
    topic_ranks AS MATERIALIZED (  -- once per matching topic, not per message of it
        SELECT t.id, ts_rank_cd(t.search_vector, query.q, 1) AS rank
          FROM topics t CROSS JOIN query
         WHERE t.session_id IN (SELECT id FROM scope) AND t.search_vector @@ query.q
    ),
    hits AS (
        SELECT m.id, m.session_id, m.topic_id, m.content, m.created_at, t.title,
               t.keep_in_memory, t.deprecated,
               ts_rank_cd(m.search_vector, query.q, 1)
               + {TOPIC_WEIGHT} * coalesce(topic_ranks.rank, 0) AS base
          FROM messages m
          JOIN topics t ON t.id = m.topic_id
          LEFT JOIN topic_ranks ON topic_ranks.id = m.topic_id
         CROSS JOIN query
         WHERE m.session_id IN (SELECT id FROM scope)
           AND m.search_vector @@ query.q
           AND m.role <> 'tool'
           AND (:deprecated OR NOT t.deprecated)
         ORDER BY base DESC
         LIMIT {RERANKED}
    ),
    scored AS (
        SELECT hits.*, hits.base + {NEIGHBOUR_WEIGHT} * coalesce(around.rank, 0) AS score
          FROM hits
          LEFT JOIN LATERAL (
              SELECT sum(ts_rank_cd(n.search_vector, (SELECT q FROM query), 1)) AS rank
                FROM ((SELECT search_vector FROM messages
                        WHERE session_id = hits.session_id AND id < hits.id AND role <> 'tool'
                        ORDER BY id DESC LIMIT {NEIGHBOURS})
                      UNION ALL
                      (SELECT search_vector FROM messages
                        WHERE session_id = hits.session_id AND id > hits.id AND role <> 'tool'
                        ORDER BY id LIMIT {NEIGHBOURS})) AS n
          ) AS around ON true
         ORDER BY score DESC, hits.id DESC
         LIMIT :limit
    )
    SELECT scored.id AS message_id, scored.session_id, scored.topic_id, scored.title,
           CASE WHEN length(scored.content) <= :whole THEN scored.content
                ELSE ts_headline('english', scored.content, query.q, :headline) END AS snippet,
           scored.keep_in_memory, scored.deprecated, scored.score, scored.created_at
      FROM scored CROSS JOIN query
     ORDER BY scored.score DESC, scored.id DESC
    """
)

_TOPICS = text(
    f"""
    WITH {_QUERY_AND_SCOPE}
    SELECT NULL::bigint AS message_id, t.session_id, t.id AS topic_id, t.title,
           CASE WHEN length(coalesce(t.summary, t.title, '')) <= :whole
                THEN coalesce(t.summary, t.title, '')
                ELSE ts_headline('english', coalesce(t.summary, t.title, ''), query.q, :headline)
           END AS snippet,
           t.keep_in_memory, t.deprecated,
           ts_rank_cd(t.search_vector, query.q, 1) AS score, t.created_at
      FROM topics t CROSS JOIN query
     WHERE t.session_id IN (SELECT id FROM scope)
       AND t.search_vector @@ query.q
       AND (:deprecated OR NOT t.deprecated)
     ORDER BY score DESC, t.created_at DESC
     LIMIT :limit
    """
)
