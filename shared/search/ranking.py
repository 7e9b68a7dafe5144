"""How a scope's messages and topics are found and ranked by a query's words: one
statement, SEARCH for a lexical search; a hybrid search's words side, `scores`, whose
few fused winners HITS then dresses (shared/search/service.py).

The ranking is BM25's idea on PostgreSQL's stored vectors, measured on LoCoMo by
bench/recall_quality.py (docs/benchmarks.md):

- **Words.** The query's words (plainto_tsquery: English stemming, stop-words out, and no
  input is a syntax error) are OR-ed: a question's words are rarely all in the turn that
  answers it.
- **Each word weighed by its rarity in the scope.** A word's weight is its BM25 idf among
  the scope's messages, `ln(1 + (N - df + 0.5) / (df + 0.5))`, and a text's score is the
  sum over the words of weight × `ts_rank` of that word alone. A name said in every turn
  counts for little, the one rare word of a question for much. (A plain `ts_rank_cd`
  of the OR-ed query weighs every word alike: recall@10 0.308 against 0.680.)
- **Context.** A message's score adds NEIGHBOUR_WEIGHT × the scores of the NEIGHBOURS
  turns on each side of it in its session: a question's words are often spread over a
  question and its answer. Only the best RERANKED messages by their own score get this
  (two index probes each). A hybrid search gets each message's own score and its
  neighbours' apart, with the cosines of both, for the fusion to apply the same rule to
  the fused scores (shared/search/fusion.py), and scores the nearest by meaning that the
  words' best did not bring by the same words and weights (`scores_of`).
- **The topic a message belongs to** is ranked beside it, not into it: adding a share of
  the topic's score to each of its messages lifted every turn of a matching topic alike
  and cost recall (with idf weights, a share of 0.3 gave recall@10 0.538 on LoCoMo's dev
  split, none 0.648, both with ts_rank_cd). A topic
  is a hit of its own, its title weighing as much as a message's text and its summary
  half that, with the same word weights, so the mixed list is one scale.
- **Common words do not find candidates** in a large scope. A word that the planner's
  statistics (`pg_stats.most_common_elem_freqs`, kept by ANALYZE) put in more than
  COMMON_MATCHES of the scope's messages (its share of all messages × the scope's size)
  does not; the query's other words find the candidates (the rarest alone when every
  word is common), and the common one still adds to their scores, weighed by that
  estimate. Reading and ranking every match of a common word is what made search slow
  (p95 94 ms → 30 ms in bench/search_speed.py's 100,000-message scope), and a text that
  matches only common words ranks low anyway. A scope of fewer messages than
  COMMON_MATCHES reads every match (LoCoMo's conversations, about 500 turns each).

Tool messages never count (a recall's own stored results are among them). Deprecated
topics (R18) and their messages only when asked for.
"""

from __future__ import annotations

import functools

from sqlalchemy import TextClause, text

from shared.embeddings.schema import exact_distance
from shared.infra.db.base import SEARCH_CONFIG

NEIGHBOUR_WEIGHT = 0.3
NEIGHBOURS = 2
RERANKED = 200
# ts_rank's weights for the labels D, C, B, A: a message's text is D, a topic's summary B
# and its title A (migration 0012). Equal for text and title, so both kinds share a scale.
LABEL_WEIGHTS = "{1.0, 1.0, 0.5, 1.0}"
# A word estimated to be in more than this many of the scope's messages is common.
COMMON_MATCHES = 1000
# A snippet: the best fragment of about 12 to 30 words, plain text (no <b> markup: it is
# read by models and people alike). A text this short is its own snippet, whole.
HEADLINE = 'MaxWords=30, MinWords=12, MaxFragments=1, StartSel="", StopSel=""'
WHOLE_SNIPPET_CHARS = 240


def _score(vector: str) -> str:
    """The sum over the query's words of weight × the word's rank in `vector`."""
    return (
        f"(SELECT coalesce(sum(w.idf * ts_rank('{LABEL_WEIGHTS}', {vector}, w.q, 0)), 0)"
        " FROM weighted w)"
    )


# The query's words, OR-ed (see above); no input is a syntax error.
ANY_WORD = (
    f"CAST(replace(CAST(plainto_tsquery({SEARCH_CONFIG}, :q) AS text), ' & ', ' | ') AS tsquery)"
)


def snippet(content: str) -> str:
    """A hit's snippet: the text whole when short, else its best fragment for `query`'s q."""
    return (
        f"CASE WHEN length({content}) <= :whole THEN {content}"
        f" ELSE ts_headline({SEARCH_CONFIG}, {content}, (SELECT q FROM query), :headline) END"
    )


def _message_hits(dimensions: int | None) -> str:
    """The CTE message_hits: the messages of `best` (id, session_id, own) with their
    neighbours' scores added, the best :limit. With `dimensions`, each also has its own
    words' score, its cosine to :vector (:model's vectors), and its neighbours' words'
    scores and cosines summed, with their counts (a hybrid search's fusion)."""
    meaning_columns = around_columns = around_vectors = own_vector = ""
    if dimensions is not None:
        cosine = f"1 - {exact_distance(dimensions, '{0}.embedding')}"
        vector_of = (
            "LEFT JOIN message_vectors {0} ON {0}.message_id = {1} AND {0}.model = :model"
            f" AND vector_dims({{0}}.embedding) = {dimensions}"
        )
        meaning_columns = (
            f", best.own, {cosine.format('own_vector')} AS cosine,"
            " coalesce(around.score, 0) AS around_words, around.turns,"
            " coalesce(around.meaning, 0) AS around_meaning, around.embedded"
        )
        around_columns = (
            f", count(*) AS turns, sum({cosine.format('nv')}) AS meaning,"
            " count(nv.message_id) AS embedded"
        )
        around_vectors = vector_of.format("nv", "n.id")
        own_vector = vector_of.format("own_vector", "best.id")
    return f"""
    message_hits AS (
        SELECT best.id, best.own + {NEIGHBOUR_WEIGHT} * coalesce(around.score, 0) AS score
               {meaning_columns}
          FROM best
          LEFT JOIN LATERAL (
              SELECT sum({_score("n.search_vector")}) AS score {around_columns}
                FROM ((SELECT id, search_vector FROM messages
                        WHERE session_id = best.session_id AND id < best.id AND role <> 'tool'
                        ORDER BY id DESC LIMIT {NEIGHBOURS})
                      UNION ALL
                      (SELECT id, search_vector FROM messages
                        WHERE session_id = best.session_id AND id > best.id AND role <> 'tool'
                        ORDER BY id LIMIT {NEIGHBOURS})) AS n
                {around_vectors}
          ) AS around ON true
          {own_vector}
         ORDER BY score DESC, best.id DESC
         LIMIT :limit
    )"""


def _ranked(dimensions: int | None = None) -> str:
    """The scope's best messages and topics by their words, as the CTEs message_hits and
    topic_hits (id, score; at most :limit each; see _message_hits for `dimensions`), and
    weighted, each word of the query with its weight."""
    return f"""
    WITH query AS (SELECT {ANY_WORD} AS q),
    scope AS (
        SELECT id FROM sessions WHERE org_id = :org AND agent_id = :agent AND user_id = :user
    ),
    scope_topics AS MATERIALIZED (  -- read once: the scope's size, its deprecated topics
        SELECT id, message_count, deprecated FROM topics
         WHERE session_id IN (SELECT id FROM scope)
    ),
    total AS (SELECT coalesce(sum(message_count), 0) AS n FROM scope_topics),
    shares AS (  -- each word's share of all messages, where the statistics know it
        SELECT e.lexeme, e.share
          FROM pg_stats s
         CROSS JOIN LATERAL unnest(CAST(CAST(s.most_common_elems AS text) AS text[]),
                                   s.most_common_elem_freqs) AS e(lexeme, share)
         WHERE s.schemaname = current_schema() AND s.tablename = 'messages'
           AND s.attname = 'search_vector'
    ),
    -- Each distinct word once, as a tsquery of its own, with the scope's messages it is
    -- estimated to be in; `finds`: it finds candidates (an uncommon word, or the rarest
    -- when all are common).
    words AS MATERIALIZED (
        SELECT q, estimate,
               estimate <= :common_matches
               OR (NOT bool_or(estimate <= :common_matches) OVER ()
                   AND estimate = min(estimate) OVER ())
               AS finds
          FROM (SELECT CAST(part AS tsquery) AS q, coalesce(shares.share, 0) * total.n AS estimate
                  FROM (SELECT DISTINCT part
                          FROM query,
                               regexp_split_to_table(CAST(query.q AS text), ' \\| ') AS part
                         WHERE part <> '') AS parts
                 CROSS JOIN total
                  LEFT JOIN shares
                    ON shares.lexeme = (tsvector_to_array(CAST(part AS tsvector)))[1]
               ) AS estimated
    ),
    found AS (
        SELECT CAST(string_agg(CAST(q AS text), ' | ') AS tsquery) AS q FROM words WHERE finds
    ),
    matches AS MATERIALIZED (
        SELECT m.id, m.session_id, m.search_vector
          FROM messages m
         CROSS JOIN found
         WHERE :messages
           AND m.session_id IN (SELECT id FROM scope)
           AND m.search_vector @@ found.q
           AND m.role <> 'tool'
           AND (:deprecated
                OR m.topic_id NOT IN (SELECT id FROM scope_topics WHERE deprecated))
    ),
    weighted AS MATERIALIZED (  -- each word's BM25 idf in the scope
        SELECT words.q, ln(1 + (greatest(total.n - df.n, 0) + 0.5) / (df.n + 0.5)) AS idf
          FROM words
         CROSS JOIN total
         CROSS JOIN LATERAL (
             SELECT CASE WHEN words.finds
                         THEN (SELECT count(*) FROM matches
                                WHERE matches.search_vector @@ words.q)
                         ELSE words.estimate END AS n
         ) AS df
    ),
    best AS (
        SELECT matches.id, matches.session_id, {_score("matches.search_vector")} AS own
          FROM matches
         ORDER BY own DESC
         LIMIT {RERANKED}
    ),
    {_message_hits(dimensions)},
    topic_hits AS (
        SELECT t.id, {_score("t.search_vector")} AS score
          FROM topics t CROSS JOIN query
         WHERE :topics
           AND t.session_id IN (SELECT id FROM scope)
           AND t.search_vector @@ query.q
           AND (:deprecated OR NOT t.deprecated)
         ORDER BY score DESC, t.created_at DESC
         LIMIT :limit
    )
"""


# A lexical search: the best :limit of both kinds, each as its hit.
SEARCH = text(
    f"""
    {_ranked()}
    SELECT 'message' AS kind, m.id AS message_id, m.session_id, m.topic_id, t.title,
           {snippet("m.content")} AS snippet,
           t.keep_in_memory, t.deprecated, hit.score, m.created_at
      FROM message_hits hit
      JOIN messages m ON m.id = hit.id
      JOIN topics t ON t.id = m.topic_id
    UNION ALL
    SELECT 'topic', NULL, t.session_id, t.id, t.title,
           {snippet("coalesce(t.summary, t.title, '')")},
           t.keep_in_memory, t.deprecated, hit.score, t.created_at
      FROM topic_hits hit
      JOIN topics t ON t.id = hit.id
     ORDER BY score DESC, created_at DESC, message_id DESC NULLS LAST
     LIMIT :limit
    """
)


# A hybrid search's columns: a message's own words' score and what _message_hits adds; a
# topic's words' score; a word of the query (`word`, as a tsquery's text) and its weight.
_HYBRID_COLUMNS = (
    "kind, message_id, topic_id, score, cosine, around_words, turns, around_meaning, embedded, word"
)
_MESSAGES_SCORED = """
    SELECT 'message' AS kind, hit.id AS message_id, NULL AS topic_id, hit.own AS score,
           hit.cosine, hit.around_words, hit.turns, hit.around_meaning, hit.embedded,
           NULL AS word
      FROM message_hits hit"""


@functools.cache
def scores(dimensions: int) -> TextClause:
    """A hybrid search's words side: the best :limit of each kind by key and score, with
    what the fusion needs of the meaning of messages and of their neighbours, and the
    query's words with their weights, for `scores_of`. Only the fused few become hits
    (HITS): a snippet is a ts_headline, and the pool is hundreds."""
    return text(
        f"""
        {_ranked(dimensions)}
        SELECT {_HYBRID_COLUMNS} FROM (
            {_MESSAGES_SCORED}
            UNION ALL
            SELECT 'topic', NULL, hit.id, hit.score, NULL, 0, 0, 0, 0, NULL FROM topic_hits hit
            UNION ALL
            SELECT 'word', NULL, NULL, w.idf, NULL, 0, 0, 0, 0, CAST(w.q AS text) FROM weighted w
        ) AS scored
         ORDER BY score DESC, message_id DESC NULLS LAST, topic_id  -- the fusion's ties
        """
    )


@functools.cache
def scores_of(dimensions: int) -> TextClause:
    """The messages :ids of the scope (the nearest by meaning that the words' best did
    not bring) as `scores` has them, by the words and weights `scores` gave (:words,
    :idfs): a message a query's name or place matches without being among the words'
    best must not count as matching nothing."""
    return text(
        f"""
        WITH scope AS (
            SELECT id FROM sessions WHERE org_id = :org AND agent_id = :agent AND user_id = :user
        ),
        weighted AS (
            SELECT CAST(w.word AS tsquery) AS q, w.idf
              FROM unnest(CAST(:words AS text[]), CAST(:idfs AS float8[])) AS w(word, idf)
        ),
        best AS (
            SELECT m.id, m.session_id, {_score("m.search_vector")} AS own
              FROM messages m
             WHERE m.id = ANY(CAST(:ids AS bigint[])) AND m.session_id IN (SELECT id FROM scope)
        ),
        {_message_hits(dimensions)}
        {_MESSAGES_SCORED}
        """
    )


# The hits of these messages and topics (ids a search of this scope found), with the
# snippets for :q; their scores are the caller's.
HITS = text(
    f"""
    WITH query AS (SELECT {ANY_WORD} AS q)
    SELECT 'message' AS kind, m.id AS message_id, m.session_id, m.topic_id, t.title,
           {snippet("m.content")} AS snippet, t.keep_in_memory, t.deprecated, m.created_at
      FROM messages m
      JOIN topics t ON t.id = m.topic_id
     WHERE m.id = ANY(CAST(:message_ids AS bigint[]))
    UNION ALL
    SELECT 'topic', NULL, t.session_id, t.id, t.title,
           {snippet("coalesce(t.summary, t.title, '')")}, t.keep_in_memory, t.deprecated,
           t.created_at
      FROM topics t
     WHERE t.id = ANY(CAST(:topic_ids AS uuid[]))
    """
)
