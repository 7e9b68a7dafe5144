"""bench/fusion_study ([3.3]): which fusion of words and meaning finds LoCoMo's evidence turns?

Offline, in one process: for every question of the dev split it scores every turn of its
conversation (one conversation is one scope, as in bench/recall_quality.py) by

- **words**: shared/search/ranking.py's formula, computed by PostgreSQL itself
  (`to_tsvector('english', …)`, the query's words OR-ed, each word's BM25 idf in the
  scope × `ts_rank` of that word alone, normalization 0). The best RERANKED (200) turns
  by their own score add NEIGHBOUR_WEIGHT (0.3) × the own scores of NEIGHBOURS (2) turns
  each side in their session, and rank by that, later turn first on a tie. No tables are
  written: each conversation's vectors live in a temporary table of one connection.
- **meaning**: the cosine of the question's embedding to each turn's (a local
  sentence-transformers model, unit-length vectors), the text embedded being the turn
  alone or the turn after its session's previous turn. Optionally, as the words do, a
  turn adds a weight × the cosines of its 1 or 2 neighbours each side.
- **fusions** over the candidates the system would have, the best `--pool` (200) turns
  by words (turns that match a word) ∪ the best `--pool` by their own cosine (an index's
  nearest neighbours): reciprocal rank fusion (RRF) of the two lists, weighted sums of
  both scores normalised over the candidates (min-max or z-score), and "fused then
  neighbours": the weighted sum of each turn's own z-scores (words without neighbours),
  plus NEIGHBOUR_WEIGHT × that sum of NEIGHBOURS turns each side, as the words do alone.

Both sides see the same text: `--speaker-names` is bench/recall_quality.py's flag (each
turn stored as `<speaker>: <text>`); by default both modes are run. The metric and the
categories are bench/recall_quality.py's (recall@5/@10 of the evidence turns, mean over
the 383 category 1–4 questions of the dev split).

Needs the `bench-embeddings` extras beside the project (torch first, from the CPU wheel):

    pip install torch==2.13.0 && pip install -e '.[dev,bench-embeddings]'
    HF_HUB_OFFLINE=1 python -m bench.fusion_study ../shared/data/locomo/locomo.dev.json \\
        [--speaker-names | --no-speaker-names] [--pool 200] [--model DIR] [--all] \\
        [--backend sentence-transformers|wordllama] \\
        [--database-url postgresql://postgres@127.0.0.1:5432/postgres]

It prints the baselines, the best variant of each family and the grid's best (`--all`:
every variant), then the shipped and the recommended fusion by candidate pool, and the
recommended question by question against the words and the shipped fusion. Nothing is
written to the database.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg2

from bench.embeddings_server import Model, add_model_arguments, load_embedder
from bench.recall_quality import CATEGORIES, Conversation, K, Question, Score, load
from shared.search.ranking import LABEL_WEIGHTS, NEIGHBOUR_WEIGHT, NEIGHBOURS, RERANKED

DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
RRF_K = (10, 30, 60)
WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7)  # the share of meaning in a weighted sum
VECTOR_NEIGHBOUR_WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5)
VECTOR_NEIGHBOURS = (1, 2)
MEAN_NEIGHBOUR_WEIGHTS = (0.5, 1.0)  # × the mean cosine of 2 each side

# One question's own lexical score of every turn, with the rest ranking.py's statement
# does: each distinct word of the OR-ed query weighed by its idf in the scope.
OWN_SCORES = f"""
WITH query AS (
    SELECT CAST(replace(CAST(plainto_tsquery('english', %(q)s) AS text), ' & ', ' | ')
                AS tsquery) AS q
),
words AS (
    SELECT DISTINCT CAST(part AS tsquery) AS q
      FROM query, regexp_split_to_table(CAST(query.q AS text), ' \\| ') AS part
     WHERE part <> ''
),
weighted AS MATERIALIZED (  -- once per question, not once per turn
    SELECT words.q, ln(1 + (greatest(total.n - df.n, 0) + 0.5) / (df.n + 0.5)) AS idf
      FROM words
     CROSS JOIN (SELECT count(*) AS n FROM turns) AS total
     CROSS JOIN LATERAL (SELECT count(*) AS n FROM turns WHERE vec @@ words.q) AS df
)
SELECT t.i,
       (SELECT coalesce(sum(w.idf * ts_rank('{LABEL_WEIGHTS}', t.vec, w.q, 0)), 0)
          FROM weighted w),
       coalesce(t.vec @@ (SELECT q FROM query), false)
  FROM turns t
 ORDER BY t.i
"""


# --- one conversation's turns and scores -------------------------------------------------


@dataclass
class Scope:
    """One conversation: its turns in order, and per question the turns' scores."""

    conversation: Conversation
    dia: list[str]
    session: np.ndarray  # the turn's session index
    own: np.ndarray  # (questions, turns): words, own score
    matched: np.ndarray  # (questions, turns): the turn matches a word of the question
    cosine: dict[str, np.ndarray]  # text variant -> (questions, turns)

    @property
    def questions(self) -> list[Question]:
        return self.conversation.questions


def turn_texts(conversation: Conversation, *, names: bool) -> dict[str, list[str]]:
    """The texts to embed for each turn: alone, and after its session's previous turn."""
    alone, with_previous = [], []
    for session in conversation.sessions:
        previous = None
        for turn in session:
            text = conversation.content(turn, names=names)
            alone.append(text)
            with_previous.append(text if previous is None else f"{previous}\n{text}")
            previous = text
    return {"turn": alone, "previous+turn": with_previous}


def lexical_scores(
    cursor: Any, conversation: Conversation, *, names: bool
) -> tuple[np.ndarray, np.ndarray]:
    texts = turn_texts(conversation, names=names)["turn"]
    cursor.execute("DROP TABLE IF EXISTS turns")
    cursor.execute("CREATE TEMPORARY TABLE turns (i int PRIMARY KEY, vec tsvector NOT NULL)")
    cursor.executemany(
        "INSERT INTO turns VALUES (%s, to_tsvector('english', %s))", list(enumerate(texts))
    )
    cursor.execute("ANALYZE turns")
    own = np.zeros((len(conversation.questions), len(texts)))
    matched = np.zeros_like(own, dtype=bool)
    for row, question in enumerate(conversation.questions):
        cursor.execute(OWN_SCORES, {"q": question.text})
        for i, score, hit in cursor.fetchall():
            own[row, i], matched[row, i] = score, hit
    return own, matched


def scopes(
    conversations: Sequence[Conversation], embedder: Model, database_url: str, *, names: bool
) -> Iterator[Scope]:
    connection = psycopg2.connect(database_url)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET client_min_messages = warning")  # stop-word-only NOTICEs
            for conversation in conversations:
                own, matched = lexical_scores(cursor, conversation, names=names)
                asked = embedder.embed([q.text for q in conversation.questions])
                cosine = {
                    variant: asked @ embedder.embed(texts).T
                    for variant, texts in turn_texts(conversation, names=names).items()
                }
                yield Scope(
                    conversation,
                    [t.dia_id for s in conversation.sessions for t in s],
                    np.array([n for n, s in enumerate(conversation.sessions) for _ in s]),
                    own, matched, cosine,
                )  # fmt: skip
        connection.rollback()
    finally:
        connection.close()


# --- rankings ----------------------------------------------------------------------------


def around(scores: np.ndarray, session: np.ndarray, reach: int) -> np.ndarray:
    """Each turn's sum of the scores of `reach` turns each side of it in its session."""
    total = np.zeros_like(scores)
    for offset in range(1, reach + 1):
        same_before = session[offset:] == session[:-offset]
        total[..., offset:] += np.where(same_before, scores[..., :-offset], 0)
        total[..., :-offset] += np.where(same_before, scores[..., offset:], 0)
    return total


@dataclass(frozen=True)
class Lists:
    """One question's candidates and the two rankings' scores of them."""

    pool: np.ndarray  # turn indexes
    words: np.ndarray  # words' score with neighbours, of every pool turn
    meaning: np.ndarray  # meaning's score (with neighbours if asked), of every pool turn
    words_rank: np.ndarray  # 1-based rank in the words' list, inf when not in it
    meaning_rank: np.ndarray
    own: np.ndarray  # words' own score (no neighbours), of every turn
    cosine: np.ndarray  # the cosine (no neighbours), of every turn
    session: np.ndarray  # every turn's session index


def words_list(own: np.ndarray, matched: np.ndarray, session: np.ndarray) -> np.ndarray:
    """ranking.py's message list: the turn indexes, best first."""
    candidates = np.flatnonzero(matched)
    best = candidates[np.argsort(-own[candidates], kind="stable")][:RERANKED]
    score = own + NEIGHBOUR_WEIGHT * around(own, session, NEIGHBOURS)
    # ORDER BY score DESC, id DESC: the later turn first on a tie.
    return best[np.lexsort((-best, -score[best]))]


def ranks(order: np.ndarray, size: int) -> np.ndarray:
    rank = np.full(size, np.inf)
    rank[order] = np.arange(1, len(order) + 1)
    return rank


def top(scores: np.ndarray, n: int) -> np.ndarray:
    return np.argsort(-scores, kind="stable")[:n]


Fusion = Callable[[Lists], np.ndarray]


def rrf(k: int) -> Fusion:
    return lambda lists: 1 / (k + lists.words_rank) + 1 / (k + lists.meaning_rank)


def weighted(share: float, normalise: str) -> Fusion:
    def fuse(lists: Lists) -> np.ndarray:
        norm = _min_max if normalise == "min-max" else _z
        return (1 - share) * norm(lists.words) + share * norm(lists.meaning)

    return fuse


def then_neighbours(share: float) -> Fusion:
    """Each turn's own scores fused, then the words' rule on the fused score: + NEIGHBOUR_WEIGHT
    × the fused scores of NEIGHBOURS turns each side. The z-scores' mean and spread are the
    candidates' own scores', applied to every turn (a neighbour need not be a candidate)."""

    def fuse(lists: Lists) -> np.ndarray:
        own = (1 - share) * _z_by(lists.own, lists.pool) + share * _z_by(lists.cosine, lists.pool)
        fused = own + NEIGHBOUR_WEIGHT * around(own, lists.session, NEIGHBOURS)
        return fused[lists.pool]

    return fuse


def _z_by(x: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """Every value's z-score by the mean and spread of `pool`'s."""
    deviation = x[pool].std()
    return (x - x[pool].mean()) / deviation if deviation > 0 else np.zeros_like(x)


def _min_max(x: np.ndarray) -> np.ndarray:
    span = x.max() - x.min()
    return (x - x.min()) / span if span > 0 else np.zeros_like(x)


def _z(x: np.ndarray) -> np.ndarray:
    deviation = x.std()
    return (x - x.mean()) / deviation if deviation > 0 else np.zeros_like(x)


@dataclass(frozen=True)
class Meaning:
    """How a turn's meaning is scored: the text embedded, and its neighbours' share."""

    text: str = "turn"
    weight: float = 0.0
    reach: int = 0
    mean: bool = False  # the neighbours' mean cosine, not their sum

    def __str__(self) -> str:
        of = "mean cos" if self.mean else "cos"
        neighbours = f", +{self.weight:g}×{of} of {self.reach} each side" if self.weight else ""
        return f"{self.text}{neighbours}"

    def similar(self, cosine: np.ndarray, session: np.ndarray) -> np.ndarray:
        """Each turn's meaning score: its cosine plus its neighbours' share."""
        if not self.weight:
            return cosine
        neighbours = around(cosine, session, self.reach)
        if self.mean:
            count = around(np.ones_like(cosine), session, self.reach)
            neighbours = np.where(count > 0, neighbours / np.maximum(count, 1), cosine)
        return cosine + self.weight * neighbours


def evaluate(
    all_scopes: Sequence[Scope], meaning: Meaning | None, fusion: Fusion | None, *, pool: int
) -> Score:
    """Words alone (meaning None), meaning alone (fusion None), or a fusion of both."""
    score = Score.empty()
    for scope in all_scopes:
        for row, question in enumerate(scope.questions):
            own, matched = scope.own[row], scope.matched[row]
            words = words_list(own, matched, scope.session)
            if meaning is None:
                score.add(question, [scope.dia[i] for i in words[: max(K)]])
                continue
            cosine = scope.cosine[meaning.text][row]
            similar = meaning.similar(cosine, scope.session)
            nearest = top(cosine, pool)  # the index's candidates, by their own cosine
            by_meaning = nearest[np.argsort(-similar[nearest], kind="stable")]
            if fusion is None:
                score.add(question, [scope.dia[i] for i in by_meaning[: max(K)]])
                continue
            by_words = words[:pool]
            candidates = np.union1d(by_words, nearest)
            lexical = own + NEIGHBOUR_WEIGHT * around(own, scope.session, NEIGHBOURS)
            size = len(own)
            lists = Lists(
                candidates, lexical[candidates], similar[candidates],
                ranks(by_words, size)[candidates], ranks(by_meaning, size)[candidates],
                own, cosine, scope.session,
            )  # fmt: skip
            fused = candidates[np.argsort(-fusion(lists), kind="stable")]
            score.add(question, [scope.dia[i] for i in fused[: max(K)]])
    return score


# The fusion shipped first (shared/search/fusion.py): z-scores over the candidates, 0.6
# meaning, neighbours on the words only; and the one docs/benchmarks.md recommends since:
# the same shares, the words' neighbour rule applied to the fused score.
SHIPPED = weighted(0.6, "z")
SHIPPED_LABEL = "z sum, 0.6 meaning; meaning: turn"
RECOMMENDED = then_neighbours(0.6)
RECOMMENDED_LABEL = "fused then neighbours, 0.6 meaning; meaning: turn"


# --- the grid and the report -------------------------------------------------------------


def variants() -> Iterator[tuple[str, Meaning | None, Fusion | None]]:
    yield "words (ranking.py)", None, None
    meanings = [
        Meaning(text, weight, reach)
        for text in ("turn", "previous+turn")
        for weight, reach in [(0.0, 0), *itertools.product(VECTOR_NEIGHBOUR_WEIGHTS,
                                                            VECTOR_NEIGHBOURS)]
    ] + [Meaning("turn", weight, 2, mean=True) for weight in MEAN_NEIGHBOUR_WEIGHTS]  # fmt: skip
    for meaning in meanings:
        yield f"meaning: {meaning}", meaning, None
    for meaning in meanings:
        for k in RRF_K:
            yield f"RRF k={k}; meaning: {meaning}", meaning, rrf(k)
        for normalise, share in itertools.product(("min-max", "z"), WEIGHTS):
            yield (
                f"{normalise} sum, {share:g} meaning; meaning: {meaning}",
                meaning, weighted(share, normalise),
            )  # fmt: skip
        if not meaning.weight:  # its neighbours come after the fusion
            for share in WEIGHTS:
                yield (
                    f"fused then neighbours, {share:g} meaning; meaning: {meaning}",
                    meaning, then_neighbours(share),
                )  # fmt: skip


def row(label: str, score: Score) -> str:
    by_category = " ".join(_at10(score, c) for c in CATEGORIES)
    return f"  {score.at(5):>5.3f} {score.at(10):>6.3f}  {by_category}  {label}"


def _at10(score: Score, category: int) -> str:
    """R@10 of a category and the questions' worth of evidence found: 0.474 9.0/19."""
    recalls = score.recalls[category]
    found = sum(r[K.index(10)] for r in recalls)
    return f"{score.at(10, category):>6.3f} {f'{found:.1f}/{len(recalls)}':>9}"


HEADER = (
    "   R@5   R@10  "
    + " ".join(f"{'c' + str(c) + ' @10, found':>16}" for c in CATEGORIES)
    + "  variant"
)


def family(label: str) -> str:
    return label.split(";")[0].split(",")[0].split(" k=")[0]


def study(all_scopes: Sequence[Scope], *, pool: int, every: bool) -> None:
    results = [(label, evaluate(all_scopes, m, f, pool=pool)) for label, m, f in variants()]
    print(HEADER)
    if every:
        for label, score in results:
            print(row(label, score))
        return
    print(row(*results[0]))
    best: dict[str, tuple[str, Score]] = {}
    for label, score in results[1:]:
        name = "meaning alone" if label.startswith("meaning") else family(label)
        if name not in best or score.at(10) > best[name][1].at(10):
            best[name] = (label, score)
    for label, score in results[1:]:
        if label in ("meaning: turn", "meaning: previous+turn", SHIPPED_LABEL, RECOMMENDED_LABEL):
            print(row(label, score))
    for name, (label, score) in best.items():
        print(row(f"best {name}: {label}", score))
    print("  the ten best of the grid by R@10:")
    for label, score in sorted(results[1:], key=lambda r: -r[1].at(10))[:10]:
        print(row(label, score))


def pools(all_scopes: Sequence[Scope]) -> None:
    """The shipped and the recommended fusion with fewer or more candidates from each list."""
    for fusion, label in ((SHIPPED, SHIPPED_LABEL), (RECOMMENDED, RECOMMENDED_LABEL)):
        for pool in (20, 50, 100, 200, 1000):
            score = evaluate(all_scopes, Meaning(), fusion, pool=pool)
            print(row(f"pool {pool} ∪ {pool}: {label}", score))


def paired(all_scopes: Sequence[Scope], *, pool: int) -> None:
    """The recommended fusion question by question against the words and the shipped fusion:
    how many questions' R@10 it raises and lowers, and the net change by conversation."""
    column = K.index(10)
    for label, meaning, fusion in (("words", None, None), ("shipped", Meaning(), SHIPPED)):
        better = worse = 0
        nets = []
        for scope in all_scopes:
            before = evaluate([scope], meaning, fusion, pool=pool).recalls
            after = evaluate([scope], Meaning(), RECOMMENDED, pool=pool).recalls
            changes = [
                b[column] - a[column]
                for c in CATEGORIES
                for a, b in zip(before[c], after[c], strict=True)
            ]  # fmt: skip
            better += sum(d > 0 for d in changes)
            worse += sum(d < 0 for d in changes)
            nets.append(f"{sum(changes):+.1f}")
        print(
            f"  recommended against {label}: R@10 up for {better} questions, down for {worse};"
            f" net by conversation {' '.join(nets)} questions' worth"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--speaker-names", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--pool", type=int, default=RERANKED, help="candidates from each list")
    add_model_arguments(parser)
    parser.add_argument("--database-url", default=DATABASE_URL)
    parser.add_argument("--all", action="store_true", help="print every variant")
    args = parser.parse_args()
    conversations = load(args.files)
    began = time.perf_counter()
    embedder = load_embedder(args, name=None)
    turns = sum(len(s) for c in conversations for s in c.sessions)
    questions = sum(len(c.questions) for c in conversations)
    print(
        f"bench/fusion_study: {len(conversations)} conversations, {turns} turns, {questions}"
        f" questions; model {embedder.name} ({embedder.dimensions} dimensions, loaded in"
        f" {time.perf_counter() - began:.1f} s); pool {args.pool} ∪ {args.pool}"
    )
    for names in [args.speaker_names] if args.speaker_names is not None else [False, True]:
        began = time.perf_counter()
        all_scopes = list(scopes(conversations, embedder, args.database_url, names=names))
        print(
            f"\nspeaker names in the text: {'yes' if names else 'no'} (scores and embeddings"
            f" of {2 * turns + questions} texts in {time.perf_counter() - began:.0f} s)"
        )
        study(all_scopes, pool=args.pool, every=args.all)
        print("  candidate pools:")
        pools(all_scopes)
        paired(all_scopes, pool=args.pool)


if __name__ == "__main__":
    main()
