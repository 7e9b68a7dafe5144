"""Every operation of the API, once: each method builds its request as a `Call` (method,
path, query, body) and hands it to the client's `_call`, which sends it. `Client`
answers with the dict, `AsyncClient` with a coroutine of it (the type parameters).

Names: reads are the noun (`session`, `messages`, `memory`), writes the verb
(`create_session`, `post_messages`, `set_memory_state`). Arguments are snake_case; the
JSON sent and the dicts answered are the API's, camelCase, unchanged. What a call
becomes on the wire, and the answer read back, is _calls.py.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

from ._calls import JSON, Call, Id, MemoryState, Message, Trigger, query_value, scope, seg

# A search text longer than this once percent-encoded is sent by POST /search: with the
# longest ids beside it, a GET's request line would pass the server's 8,190 bytes (a 414;
# 1,000 CJK characters alone are 9,000). A shorter one stays a GET, which is retried after
# a dropped connection as a POST is not.
MAX_GET_SEARCH_BYTES = 2048


_Answer = TypeVar("_Answer")  # what a JSON answer is returned as
_Nothing = TypeVar("_Nothing")  # what a 204 is returned as


class Operations(Generic[_Answer, _Nothing]):
    """The API's operations; a client supplies `_call` and `_call_no_content`."""

    def _call(self, call: Call) -> _Answer:
        raise NotImplementedError

    def _call_no_content(self, call: Call) -> _Nothing:
        raise NotImplementedError

    # --- agents ---------------------------------------------------------------------

    def put_agent(
        self,
        agent_id: str,
        soul: str = "",
        skills: Sequence[Any] = (),
        tools: Sequence[Mapping[str, Any]] = (),
    ) -> _Answer:
        """`PUT /agents/{agentId}`: create or replace the agent's profile (the stable
        prefix's soul, skills and tools)."""
        body = {"soul": soul, "skills": list(skills), "tools": [dict(t) for t in tools]}
        return self._call(Call("PUT", f"/agents/{seg(agent_id)}", json=body))

    def agent(self, agent_id: str) -> _Answer:
        """`GET /agents/{agentId}`: the agent's profile."""
        return self._call(Call("GET", f"/agents/{seg(agent_id)}"))

    def erase_user(self, agent_id: str, user_id: str) -> _Answer:
        """`DELETE /agents/{agentId}/users/{userId}`: erase everything held about this
        user of this agent; `{erased: {what: count}}`."""
        return self._call(Call("DELETE", f"/agents/{seg(agent_id)}/users/{seg(user_id)}"))

    # --- sessions, messages, topics -------------------------------------------------

    def create_session(self, agent_id: str, user_id: str) -> _Answer:
        """`POST /sessions`: a new session, its first topic active."""
        return self._call(Call("POST", "/sessions", json=scope(agent_id, user_id)))

    def sessions(self, agent_id: str, user_id: str) -> _Answer:
        """`GET /sessions?agentId=&userId=`: the scope's sessions, newest first."""
        return self._call(Call("GET", "/sessions", params=scope(agent_id, user_id)))

    def scopes(self) -> _Answer:
        """`GET /scopes`: the org's agent + user pairs that have sessions."""
        return self._call(Call("GET", "/scopes"))

    def session(self, session_id: Id) -> _Answer:
        """`GET /sessions/{sid}`: the session with its `topics` in creation order."""
        return self._call(Call("GET", f"/sessions/{seg(session_id)}"))

    def post_messages(
        self, session_id: Id, messages: Sequence[Message] | Message, context: bool = False
    ) -> _Answer:
        """`POST /sessions/{sid}/messages`: store messages (`{role, content, name?,
        toolName?, toolCallId?}`; `name`, who spoke, as OpenAI's chat format carries it)
        in the active topic, in order, all or none.

        A list is sent as a batch (`{messages: [...]}`, answered `{messages: [{id,
        topicId, createdAt}], driftEvaluationEnqueued}`); a single dict as one message
        (answered `{id, topicId, createdAt, driftEvaluationEnqueued}`). `context=True`
        adds `context` to the answer: the assembled stack for the agent's next call,
        after these messages (one round trip per turn).
        """
        body: JSON
        if isinstance(messages, Mapping):
            body = dict(messages)
        else:
            body = {"messages": [dict(m) for m in messages]}
        params = {"context": "true"} if context else None
        return self._call(
            Call("POST", f"/sessions/{seg(session_id)}/messages", params=params, json=body)
        )

    def messages(
        self,
        session_id: Id,
        topic_id: Id | None = None,
        after_id: int | None = None,
        limit: int | None = None,
    ) -> _Answer:
        """`GET /sessions/{sid}/messages?topicId=&afterId=&limit=`: one page, oldest
        first; `nextAfterId` is the `after_id` of the next page (None on the last)."""
        params: dict[str, str] = {}
        if topic_id is not None:
            params["topicId"] = str(topic_id)
        if after_id is not None:
            params["afterId"] = str(after_id)
        if limit is not None:
            params["limit"] = str(limit)
        return self._call(Call("GET", f"/sessions/{seg(session_id)}/messages", params=params))

    def create_topic(self, session_id: Id, title: str | None = None) -> _Answer:
        """`POST /sessions/{sid}/topics`: open a new active topic; the prior one is
        closed and its summary enqueued."""
        body = {} if title is None else {"title": title}
        return self._call(Call("POST", f"/sessions/{seg(session_id)}/topics", json=body))

    def evaluate(self, session_id: Id, trigger: Trigger) -> _Answer:
        """`POST /sessions/{sid}/evaluate`: an exit trigger (`navigation`, `visibility`,
        `disconnect`, `manual`) for the active topic; `{status: scheduled | coalesced |
        suppressed | dropped}`."""
        path = f"/sessions/{seg(session_id)}/evaluate"
        return self._call(Call("POST", path, json={"trigger": trigger}))

    # --- context, working memory, tools ---------------------------------------------

    def context(self, session_id: Id) -> _Answer:
        """`GET /sessions/{sid}/context`: the assembled stack (`layers`, `messages`,
        `tokens`, `stablePrefixHash`)."""
        return self._call(Call("GET", f"/sessions/{seg(session_id)}/context"))

    def set_working_memory(self, session_id: Id, working_memory: Mapping[str, Any]) -> _Answer:
        """`PUT /sessions/{sid}/working-memory`: the session's volatile working memory
        (a small JSON object, kept with a TTL)."""
        path = f"/sessions/{seg(session_id)}/working-memory"
        return self._call(Call("PUT", path, json=dict(working_memory)))

    def tools(self) -> _Answer:
        """`GET /tools`: the built-in tools as OpenAI function definitions."""
        return self._call(Call("GET", "/tools"))

    def call_tool(
        self,
        session_id: Id,
        name: str,
        arguments: Mapping[str, Any],
        tool_call_id: str | None = None,
    ) -> _Answer:
        """`POST /sessions/{sid}/tools/{name}`: run a built-in tool; `{ok, result, error,
        toolCallId}`. The call and its result are stored in the thread."""
        body: JSON = {"arguments": dict(arguments)}
        if tool_call_id is not None:
            body["toolCallId"] = tool_call_id
        path = f"/sessions/{seg(session_id)}/tools/{seg(name)}"
        return self._call(Call("POST", path, json=body))

    # --- topics and their curation --------------------------------------------------

    def topic(self, topic_id: Id) -> _Answer:
        """`GET /topics/{tid}`: the topic."""
        return self._call(Call("GET", f"/topics/{seg(topic_id)}"))

    def notes(self, topic_id: Id) -> _Answer:
        """`GET /topics/{tid}/notes`: the agent's notes of the topic."""
        return self._call(Call("GET", f"/topics/{seg(topic_id)}/notes"))

    def set_memory_state(self, topic_id: Id, state: MemoryState) -> _Answer:
        """`PUT /topics/{tid}/memory`: a user's curation (`none`, `promoted`,
        `deprecated`); the topic."""
        path = f"/topics/{seg(topic_id)}/memory"
        return self._call(Call("PUT", path, json={"state": state}))

    def cycle_memory_state(self, topic_id: Id) -> _Answer:
        """`POST /topics/{tid}/memory/cycle`: the topic, moved to its next memory state."""
        return self._call(Call("POST", f"/topics/{seg(topic_id)}/memory/cycle"))

    def memory_history(self, topic_id: Id) -> _Answer:
        """`GET /topics/{tid}/history`: the topic's memory-state changes, `{changes}`."""
        return self._call(Call("GET", f"/topics/{seg(topic_id)}/history"))

    def evaluations(self, topic_id: Id) -> _Answer:
        """`GET /topics/{tid}/evaluations`: the topic's drift evaluations."""
        return self._call(Call("GET", f"/topics/{seg(topic_id)}/evaluations"))

    # --- a scope's memory and facts -------------------------------------------------

    def memory(self, agent_id: str, user_id: str) -> _Answer:
        """`GET /memory?agentId=&userId=`: the scope's cross-session memory, `{entries,
        tokens, truncated, dropped}`."""
        return self._call(Call("GET", "/memory", params=scope(agent_id, user_id)))

    def search(
        self,
        agent_id: str,
        user_id: str,
        q: str,
        limit: int = 10,
        kind: Literal["topic", "message"] | None = None,
        include_deprecated: bool = False,
    ) -> _Answer:
        """`GET /search` (`POST /search` for a long `q`): the scope's topics and messages
        matching `q`, best first, `{results: [{kind, topicId, sessionId, messageId, title,
        snippet, ...}]}`."""
        asked: dict[str, Any] = {**scope(agent_id, user_id), "q": q, "limit": limit}
        if kind is not None:
            asked["kind"] = kind
        if include_deprecated:
            asked["includeDeprecated"] = True
        if len(quote(q, safe="")) > MAX_GET_SEARCH_BYTES:
            return self._call(Call("POST", "/search", json=asked))
        params = {name: query_value(value) for name, value in asked.items()}
        return self._call(Call("GET", "/search", params=params))

    def facts(self, agent_id: str, user_id: str) -> _Answer:
        """`GET /facts?agentId=&userId=`: the scope's durable facts, `{facts: {key:
        value}}`."""
        return self._call(Call("GET", "/facts", params=scope(agent_id, user_id)))

    def merge_facts(self, agent_id: str, user_id: str, facts: Mapping[str, Any]) -> _Answer:
        """`PUT /facts?agentId=&userId=`: create or update these entries; all the
        scope's facts after the merge."""
        params = scope(agent_id, user_id)
        return self._call(Call("PUT", "/facts", params=params, json=dict(facts)))

    def delete_fact(self, agent_id: str, user_id: str, key: str) -> _Nothing:
        """`DELETE /facts/{key}?agentId=&userId=`: remove one fact (no answer: 204)."""
        path = f"/facts/{seg(key)}"
        return self._call_no_content(Call("DELETE", path, params=scope(agent_id, user_id)))

    def facts_history(
        self,
        agent_id: str,
        user_id: str,
        key: str,
        before: dt.datetime | str | None = None,
        limit: int | None = None,
    ) -> _Answer:
        """`GET /facts/history?agentId=&userId=&key=&before=&limit=`: every value the key
        held, newest first, `{history: [{key, value, validFrom, validTo, changedBy,
        removedBy}], nextBefore}`; `nextBefore` is the `before` of the next page."""
        params = {**scope(agent_id, user_id), "key": key}
        if before is not None:
            params["before"] = before if isinstance(before, str) else before.isoformat()
        if limit is not None:
            params["limit"] = str(limit)
        return self._call(Call("GET", "/facts/history", params=params))

    # --- the org's accounting -------------------------------------------------------

    def usage(self, since: dt.datetime | str | None = None) -> _Answer:
        """`GET /usage?since=`: the org's LLM calls and tokens since `since` (a `datetime`
        with a timezone, or an ISO-8601 string; default: the last 30 days), `{since,
        llmCalls, promptTokens, completionTokens, byModel: {model: {...}}}`."""
        params = None
        if since is not None:
            params = {"since": since if isinstance(since, str) else since.isoformat()}
        return self._call(Call("GET", "/usage", params=params))

    def limits(self) -> _Answer:
        """`GET /limits`: the limits the org is held to (0: none) and its LLM tokens this
        month, `{requestsPerS, requestBurst, llmRpm, monthlyTokens, month, tokensUsed,
        budgetExhausted}`."""
        return self._call(Call("GET", "/limits"))

    # --- the org's own model (bring your own key) -----------------------------------

    def set_provider(self, api_key: str, model: str, base_url: str | None = None) -> _Answer:
        """`PUT /provider`: the org's summaries and drift calls use `model` with `api_key`,
        at `base_url` (an OpenAI-compatible server; None: the fleet's). The answer, as
        `provider()`'s, never holds the key."""
        body: JSON = {"apiKey": api_key, "model": model}
        if base_url is not None:
            body["baseUrl"] = base_url
        return self._call(Call("PUT", "/provider", json=body))

    def provider(self) -> _Answer:
        """`GET /provider`: the model the org's calls use, `{source, model, baseUrl,
        updatedAt}` (`source` "org" or "fleet"), never the key."""
        return self._call(Call("GET", "/provider"))

    def delete_provider(self) -> _Nothing:
        """`DELETE /provider`: back to the fleet's model."""
        return self._call_no_content(Call("DELETE", "/provider"))

    # --- re-evaluation campaigns ---------------------------------------------------

    def start_reevaluation(
        self,
        agent_id: str | None = None,
        user_id: str | None = None,
        since: dt.datetime | str | None = None,
        rate: float | None = None,
    ) -> _Answer:
        """`POST /reevaluations`: re-evaluate the org's matching topics (all of them by
        default; `since` a `datetime` with a timezone or an ISO-8601 string) at `rate`
        topics a second; `{id, state, total}`."""
        body: JSON = {}
        if agent_id is not None:
            body["agentId"] = agent_id
        if user_id is not None:
            body["userId"] = user_id
        if since is not None:
            body["since"] = since if isinstance(since, str) else since.isoformat()
        if rate is not None:
            body["rate"] = rate
        return self._call(Call("POST", "/reevaluations", json=body))

    def reevaluations(self) -> _Answer:
        """`GET /reevaluations`: the org's campaigns, newest first, `{reevaluations}`."""
        return self._call(Call("GET", "/reevaluations"))

    def reevaluation(self, campaign_id: Id) -> _Answer:
        """`GET /reevaluations/{id}`: one campaign, `{id, state, total, enqueued, done,
        failed, createdAt, finishedAt, ...}`."""
        return self._call(Call("GET", f"/reevaluations/{seg(campaign_id)}"))

    def cancel_reevaluation(self, campaign_id: Id) -> _Answer:
        """`DELETE /reevaluations/{id}`: stop enqueuing; the campaign, `cancelled` (a
        finished one is an ApiError 409)."""
        return self._call(Call("DELETE", f"/reevaluations/{seg(campaign_id)}"))

    # --- webhooks -------------------------------------------------------------------

    def create_webhook(self, url: str, events: Sequence[str], secret: str | None = None) -> _Answer:
        """`POST /webhooks`: subscribe `url` to event types; the answer's `secret` (made
        for you unless given, `whsec_…`) is shown only here: keep it to verify deliveries."""
        body: JSON = {"url": url, "events": list(events)}
        if secret is not None:
            body["secret"] = secret
        return self._call(Call("POST", "/webhooks", json=body))

    def webhooks(self) -> _Answer:
        """`GET /webhooks`: the org's subscriptions, `{webhooks}` (never their secrets)."""
        return self._call(Call("GET", "/webhooks"))

    def delete_webhook(self, webhook_id: Id) -> _Nothing:
        """`DELETE /webhooks/{id}`: unsubscribe; nothing more is delivered to it."""
        return self._call_no_content(Call("DELETE", f"/webhooks/{seg(webhook_id)}"))

    def webhook_deliveries(self, webhook_id: Id) -> _Answer:
        """`GET /webhooks/{id}/deliveries`: its newest deliveries first, `{deliveries}`."""
        return self._call(Call("GET", f"/webhooks/{seg(webhook_id)}/deliveries"))

    # --- the API itself -------------------------------------------------------------

    def import_(
        self,
        lines: bytes | str | Iterable[Mapping[str, Any] | Sequence[Any] | str],
        *,
        format: Literal["driftless", "openai-chat"] = "driftless",
        agent_id: str | None = None,
        user_id: str | None = None,
    ) -> _Answer:
        """`POST /import`: an export (its lines, as `export` yields them or as text) into
        the key's org, or with `format="openai-chat"` chat histories (one list of
        messages each) as sessions of `agent_id` and `user_id`. Answers the counts;
        importing the same lines again changes nothing."""
        if isinstance(lines, str):
            body = lines.encode()
        elif isinstance(lines, bytes):
            body = lines
        else:
            body = "".join(
                (line if isinstance(line, str) else json.dumps(line)).rstrip("\n") + "\n"
                for line in lines
            ).encode()
        given = {"format": format, "agentId": agent_id, "userId": user_id}
        params = {k: v for k, v in given.items() if v is not None}
        return self._call(Call("POST", "/import", params=params, ndjson=body))

    def import_file(
        self,
        path: str | os.PathLike[str],
        *,
        format: Literal["driftless", "openai-chat"] = "driftless",
        agent_id: str | None = None,
        user_id: str | None = None,
    ) -> _Answer:
        """`POST /import` of a file (`driftless export`'s, or chat histories): the server
        reads it line by line, one transaction a session (see `import_`)."""
        body = Path(path).read_bytes()
        return self.import_(body, format=format, agent_id=agent_id, user_id=user_id)

    def openapi(self) -> _Answer:
        """`GET /openapi.json`: the OpenAPI 3 document of the API."""
        return self._call(Call("GET", "/openapi.json"))
