"""agentId and userId are opaque strings: no two scopes share memory, whatever they hold.

The attack ([2.1] item 1): a promoted topic of agent `a:b`, user `c` was served as the
memory of agent `a`, user `b:c`, because the Redis keys joined the three with `:`.
"""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import urlencode

import pytest
from flask.testing import FlaskClient

from shared.memory.scope import Scope
from tests.helpers import new_session

# (victim, reader): two scopes that a separator-joined key could not tell apart.
CONFUSABLE = [
    (("a:b", "c"), ("a", "b:c")),
    (("{a", "b}"), ("{a:b", "}")),
    (("a}:{b", "c"), ("a", "}:{b:c")),
    (("ada lovelace", "x"), ("ada", "lovelace x")),
    ((" ada", "x"), ("ada", "x")),
    (("café", "zoë"), ("cafe\u0301", "zoe\u0308")),  # precomposed vs combining accents
    (("漢字:", "ユーザー"), ("漢字", ":ユーザー")),
]


def _memory_url(agent: str, user: str) -> str:
    return "/agents-api/memory?" + urlencode({"agentId": agent, "userId": user})


def _promoted_topic(client: FlaskClient, auth: dict[str, str], agent: str, user: str) -> str:
    session = new_session(client, auth, agent=agent, user=user)
    assert (session["agentId"], session["userId"]) == (agent, user)  # kept exactly as sent
    tid: str = session["activeTopicId"]
    client.post(f"/agents-api/sessions/{session['id']}/topics", json={}, headers=auth)
    response = client.put(
        f"/agents-api/topics/{tid}/memory", json={"state": "promoted"}, headers=auth
    )
    assert response.status_code == 200, response.json
    return tid


@pytest.mark.parametrize(("victim", "reader"), CONFUSABLE)
def test_a_promoted_topic_is_never_served_to_a_scope_whose_ids_join_to_the_same_string(
    client: FlaskClient, auth: dict[str, str], victim: tuple[str, str], reader: tuple[str, str]
) -> None:
    tid = _promoted_topic(client, auth, *victim)
    # The victim's read fills the Redis cache; the reader's must not hit it.
    victim_memory: Any = client.get(_memory_url(*victim), headers=auth).json
    assert [e["topicId"] for e in victim_memory["entries"]] == [tid]

    reader_memory: Any = client.get(_memory_url(*reader), headers=auth).json
    assert reader_memory["entries"] == []
    session = new_session(client, auth, agent=reader[0], user=reader[1])
    context: Any = client.get(f"/agents-api/sessions/{session['id']}/context", headers=auth).json
    assert context["layers"]["stable"]["memory"]["entries"] == []
    assert tid not in str(context)

    # The victim's own memory is still its own.
    victim_again: Any = client.get(_memory_url(*victim), headers=auth).json
    assert [e["topicId"] for e in victim_again["entries"]] == [tid]


@pytest.mark.parametrize(("victim", "reader"), CONFUSABLE)
def test_confusable_scopes_have_distinct_redis_hash_tags(
    victim: tuple[str, str], reader: tuple[str, str]
) -> None:
    org = uuid.uuid4()
    one = Scope(org_id=org, agent_id=victim[0], user_id=victim[1]).cache_tag
    other = Scope(org_id=org, agent_id=reader[0], user_id=reader[1]).cache_tag
    assert one != other
    for tag in (one, other):  # exactly one Cluster hash tag, holding none of the ids
        assert re.fullmatch(r"\{[0-9a-f]{64}\}", tag), tag
