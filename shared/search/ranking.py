"""The one statement that finds and ranks a scope's messages and topics for a query.

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
  (two index probes each), and the messages of `:also` (a hybrid search's nearest by
  meaning, which the fusion must score by their words too; empty in a lexical search).
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

from sqlalchemy import text

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


SEARCH = text(
    f"""
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
        (SELECT matches.id, matches.session_id, {_score("matches.search_vector")} AS own
           FROM matches
          ORDER BY own DESC
          LIMIT {RERANKED})
        UNION  -- a hybrid search's nearest messages, scored by their words as well
        (SELECT m.id, m.session_id, {_score("m.search_vector")}
           FROM messages m
          WHERE :messages AND m.id = ANY(CAST(:also AS bigint[]))
            AND m.session_id IN (SELECT id FROM scope))
    ),
    message_hits AS (
        SELECT best.id, best.own + {NEIGHBOUR_WEIGHT} * coalesce(around.score, 0) AS score
          FROM best
          LEFT JOIN LATERAL (
              SELECT sum({_score("n.search_vector")}) AS score
                FROM ((SELECT search_vector FROM messages
                        WHERE session_id = best.session_id AND id < best.id AND role <> 'tool'
                        ORDER BY id DESC LIMIT {NEIGHBOURS})
                      UNION ALL
                      (SELECT search_vector FROM messages
                        WHERE session_id = best.session_id AND id > best.id AND role <> 'tool'
                        ORDER BY id LIMIT {NEIGHBOURS})) AS n
          ) AS around ON true
         ORDER BY score DESC, best.id DESC
         LIMIT :limit
    ),
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
