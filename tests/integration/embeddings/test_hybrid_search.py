"""Search by meaning and words together, on a real PostgreSQL with pgvector: a hit no word
of the query matches is found by its meaning; a slow or failing provider answers by words
and says so; the recall tool (HTTP and MCP) answers as the search does; the scope and the
deprecated topics hold as in a lexical search."""

from __future__ import annotations

import uuid
from typing import Any

from shared.infra.db.engine import make_engine, make_session_factory
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.memory.scope import Scope
from shared.search import meaning
from shared.search.service import SearchQuery, search
from tests.embedding_standin import embedding
from tests.helpers import new_session, post_message
from tests.integration.embeddings.conftest import VectorSystem
from tests.llm_server import FakeOpenAI

# What the scripted model takes for the same meaning: a query's word and a message's
# that share no stem, so only the vectors can bring them together.
SYNONYMS = {"physician": "doctor", "automobile": "car"}
ABOUT_THE_DOCTOR = "My doctor moved her practice to Lisbon last spring."
OTHER_TURNS = ("We ship the billing stack on Friday.", "The car needs new tyres.")


def _meaning(text: str) -> list[float]:
    return embedding(" ".join(SYNONYMS.get(word, word) for word in text.lower().split()))


def _answer_by_meaning(body: dict[str, Any]) -> dict[str, Any]:
    texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
    data = [
        {"object": "embedding", "index": i, "embedding": _meaning(t)} for i, t in enumerate(texts)
    ]
    usage = {"prompt_tokens": len(texts), "total_tokens": len(texts)}
    return {"object": "list", "data": data, "model": body["model"], "usage": usage}


def _conversation(system: VectorSystem, auth: dict[str, str], user: str = "ada") -> str:
    session = new_session(system.client, auth, user=user)
    for content in (ABOUT_THE_DOCTOR, *OTHER_TURNS):
        post_message(system.client, auth, session["id"], content)
    return str(session["id"])


def _embed_all(system: VectorSystem) -> None:
    """What beat's tick and the workers' jobs do after the commit
    (tests/integration/embeddings/test_vectors.py runs them on a real worker)."""
    system.sweep()


def _search(system: VectorSystem, auth: dict[str, str], q: str, user: str = "ada") -> Any:
    answer = system.client.get(
        "/agents-api/search",
        query_string={"agentId": "agent-1", "userId": user, "q": q, "kind": "message"},
        headers=auth,
    )
    assert answer.status_code == 200, answer.json
    return answer.json


def test_a_message_no_word_of_the_query_matches_is_found_by_its_meaning(
    vectors: VectorSystem, fake_openai: FakeOpenAI
) -> None:
    fake_openai.embeddings_answer_with(_answer_by_meaning)
    auth = vectors.new_org()
    _conversation(vectors, auth)
    _embed_all(vectors)

    found = _search(vectors, auth, "Where did my physician go?")
    assert found["mode"] == "hybrid"
    assert found["results"] and found["results"][0]["snippet"] == ABOUT_THE_DOCTOR
    # By words alone the query finds nothing: "physician" is in no message.
    fake_openai.embeddings_fail(500)
    lexical = _search(vectors, auth, "Where did my physician go?!")  # not the cached text
    assert lexical["mode"] == "lexical"
    assert ABOUT_THE_DOCTOR not in [hit["snippet"] for hit in lexical["results"]]


def test_words_and_meaning_both_count_in_the_fused_list(
    vectors: VectorSystem, fake_openai: FakeOpenAI
) -> None:
    fake_openai.embeddings_answer_with(_answer_by_meaning)
    auth = vectors.new_org()
    _conversation(vectors, auth)
    _embed_all(vectors)
    found = _search(vectors, auth, "physician billing")
    snippets = [hit["snippet"] for hit in found["results"]]
    # The doctor by meaning, the billing turn by its word: both near the top.
    assert set(snippets[:2]) == {ABOUT_THE_DOCTOR, OTHER_TURNS[0]}
    scores = [hit["score"] for hit in found["results"]]
    assert scores == sorted(scores, reverse=True)


def test_a_failing_or_slow_provider_answers_by_words_and_says_so(
    vectors: VectorSystem, fake_openai: FakeOpenAI
) -> None:
    auth = vectors.new_org()
    _conversation(vectors, auth)
    _embed_all(vectors)
    fake_openai.embeddings_fail(500)
    failed = _search(vectors, auth, "billing stack")
    assert failed["mode"] == "lexical"
    assert [hit["snippet"] for hit in failed["results"]] == [OTHER_TURNS[0]]
    fake_openai.embeddings_slow(2.0)  # past the query's deadline (about 300 ms)
    slow = _search(vectors, auth, "billing stack on Friday")
    assert slow["mode"] == "lexical"
    assert [hit["snippet"] for hit in slow["results"]] == [OTHER_TURNS[0]]


def test_the_recall_tool_over_http_and_mcp_answers_as_the_search_does(
    vectors: VectorSystem, fake_openai: FakeOpenAI
) -> None:
    from web.mcp.calls import call_built_in

    fake_openai.embeddings_answer_with(_answer_by_meaning)
    auth = vectors.new_org()
    sid = _conversation(vectors, auth)
    _embed_all(vectors)
    q = "my physician"
    searched = vectors.client.get(
        "/agents-api/search",
        query_string={"agentId": "agent-1", "userId": "ada", "q": q},
        headers=auth,
    ).json
    assert searched is not None and searched["mode"] == "hybrid"
    tool = vectors.client.post(
        f"/agents-api/sessions/{sid}/tools/recall", json={"arguments": {"query": q}}, headers=auth
    ).json
    assert tool is not None and tool["ok"], tool
    runtime = vectors.client.application.extensions["driftless"]
    key = auth["Authorization"].removeprefix("Bearer ")
    over_mcp = call_built_in(
        runtime, key=key, name="recall", arguments={"sessionId": sid, "query": q}
    )

    def ids(hits: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(h["kind"], h["messageId"], h["topicId"]) for h in hits]

    assert tool["result"]["mode"] == over_mcp["result"]["mode"] == "hybrid"
    assert ids(tool["result"]["results"]) == ids(searched["results"])
    # The MCP call ran after the HTTP one, whose call and result joined the session as
    # tool messages: those are never hits, so both see the same scope.
    assert ids(over_mcp["result"]["results"]) == ids(searched["results"])


def test_the_meaning_of_another_scope_is_never_a_hit(
    vectors: VectorSystem, fake_openai: FakeOpenAI
) -> None:
    fake_openai.embeddings_answer_with(_answer_by_meaning)
    auth, other_org = vectors.new_org(), vectors.new_org()
    _conversation(vectors, other_org)  # the same words, another org
    _conversation(vectors, auth, user="grace")  # the same org, another user
    session = new_session(vectors.client, auth, user="ada")
    post_message(vectors.client, auth, session["id"], "The car needs new tyres.")
    _embed_all(vectors)
    found = _search(vectors, auth, "Where did my physician go?")
    assert found["mode"] == "hybrid"
    assert [hit["sessionId"] for hit in found["results"]] == [session["id"]]


def test_a_deprecated_topics_messages_are_found_by_meaning_only_when_asked_for(
    vectors: VectorSystem, fake_openai: FakeOpenAI
) -> None:
    fake_openai.embeddings_answer_with(_answer_by_meaning)
    auth = vectors.new_org()
    sid = _conversation(vectors, auth)
    _embed_all(vectors)
    topic_id = vectors.client.get(f"/agents-api/sessions/{sid}", headers=auth).json["activeTopicId"]
    deprecated = vectors.client.put(
        f"/agents-api/topics/{topic_id}/memory", json={"state": "deprecated"}, headers=auth
    )
    assert deprecated.status_code == 200, deprecated.json
    assert _search(vectors, auth, "my physician")["results"] == []
    shown = vectors.client.get(
        "/agents-api/search",
        query_string={"agentId": "agent-1", "userId": "ada", "q": "my physician",
                      "includeDeprecated": "true"},
        headers=auth,
    ).json  # fmt: skip
    assert shown is not None and shown["mode"] == "hybrid"
    assert [uuid.UUID(h["topicId"]) for h in shown["results"]][:1] == [uuid.UUID(topic_id)]


def test_a_scope_large_enough_to_walk_the_hnsw_index_still_keeps_to_itself(
    vectors: VectorSystem, fake_openai: FakeOpenAI, monkeypatch: Any
) -> None:
    # Any scope walks the index here; at 100,000 messages beside 200,000 the walk is what
    # keeps hybrid search within its time (bench/hybrid_speed.py).
    monkeypatch.setattr(meaning, "WALK_MIN_VECTORS", 1)
    monkeypatch.setattr(meaning, "WALK_MIN_SHARE", 0.0)
    monkeypatch.setattr(meaning, "WALK_COST_RATIO", 0)
    walked: list[bool] = []
    walks = meaning._walks
    monkeypatch.setattr(
        meaning, "_walks", lambda *a, **k: walked.append(walks(*a, **k)) or walked[-1]
    )
    fake_openai.embeddings_answer_with(_answer_by_meaning)
    auth = vectors.new_org()
    _conversation(vectors, vectors.new_org())  # the same words, another org
    _conversation(vectors, auth, user="grace")  # the same org, another user
    mine = _conversation(vectors, auth)
    _embed_all(vectors)
    found = _search(vectors, auth, "Where did my physician go?")
    assert walked == [True]
    assert found["mode"] == "hybrid"
    assert {hit["sessionId"] for hit in found["results"]} == {mine}
    assert found["results"][0]["snippet"] == ABOUT_THE_DOCTOR


class _StandinQueryVectors:
    """The query's vector as the scripted model makes it, without the HTTP round trip."""

    def __init__(self, model: str) -> None:
        self.model = model

    def vector(
        self, text: str, *, org_id: uuid.UUID | None, dimensions: int | None = None
    ) -> list[float] | None:
        return _meaning(text)


def test_the_nearest_found_beside_the_words_or_in_turn_answer_alike(
    vectors: VectorSystem, fake_openai: FakeOpenAI, monkeypatch: Any
) -> None:
    fake_openai.embeddings_answer_with(_answer_by_meaning)
    auth = vectors.new_org()
    sid = _conversation(vectors, auth)
    _embed_all(vectors)
    org = vectors.rows("SELECT org_id FROM sessions WHERE id = :sid", sid=sid)[0][0]
    apart: list[int] = []
    on_its_own = meaning._nearest_apart
    monkeypatch.setattr(meaning, "_nearest_apart", lambda *a: apart.append(1) or on_its_own(*a))
    url = vectors.factory.kw["bind"].url
    answers = {}
    for pool_size in (1, 2):  # one connection: the search's own; two: one beside it
        engine = make_engine(url.render_as_string(hide_password=False), pool_size=pool_size,
                             max_overflow=0)  # fmt: skip
        with UnitOfWork(make_session_factory(engine), RecordingQueue()) as uow:
            found = search(
                uow=uow, vectors=_StandinQueryVectors(vectors.embedder.model),
                query=SearchQuery(scope=Scope(org_id=org, agent_id="agent-1", user_id="ada"),
                                  q="Where did my physician go?", kind="message"),
            )  # fmt: skip
        engine.dispose()
        answers[pool_size] = (found.mode, [(h.message_id, h.score) for h in found.hits])
        assert len(apart) == pool_size - 1  # beside only when the pool had one to give
    assert answers[1] == answers[2]
    assert answers[1][0] == "hybrid" and answers[1][1]
