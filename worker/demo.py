"""`driftless demo`: a scripted two-session conversation, end to end over HTTP.

Against `--url`/`--key` it drives a running system; without them it starts one
(`driftless up` on a free port) and stops it afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

SUMMARY_TIMEOUT_S = 90

# Session 1: a topic full of decisions, then small talk. Session 2 opens with memory.
DECISIONS = [
    ("user", "Let's settle the stack for the billing service before Friday."),
    ("assistant", "Sure. Options: PostgreSQL or MongoDB for storage, Celery or cron for jobs."),
    ("user", "We decided to use PostgreSQL; invoices need transactions and joins."),
    ("assistant", "Agreed. PostgreSQL it is, with Alembic for migrations."),
    ("user", "I prefer Celery with Redis for the retries. Never run cron on the web hosts."),
    ("assistant", "Noted: Celery on Redis for retries, no cron on web hosts. Deadline Friday."),
]
HIKE = [
    ("user", "Unrelated, but I'm planning a hike in the Dolomites in July."),
    ("assistant", "Nice! Which trail are you considering for the Dolomites?"),
    ("user", "The Alta Via 1 trail, hut to hut, about ten days of hiking."),
    ("assistant", "Book the mountain huts early; July hiking season fills them fast."),
]
SMALL_TALK = [
    ("user", "Thanks, that was quick!"),
    ("assistant", "Happy to help. Have a nice weekend!"),
]


class Api:
    def __init__(self, base_url: str, key: str) -> None:
        self.base_url, self.key = base_url.rstrip("/"), key

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.key}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
        return json.loads(raw) if raw else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def started_system() -> Iterator[tuple[str, str]]:
    """`driftless up` on a free port; yields its URL and dev key."""
    port = _free_port()
    driftless = str(Path(sys.executable).parent / "driftless")
    process = subprocess.Popen(
        [driftless, "up"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        key = ""
        for line in process.stdout:
            if line.startswith("dl_"):
                key = line.strip()
                break
        if not key:
            raise click.ClickException("driftless up did not start; run it alone to see why")
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url)
        yield url, key
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
        if process.stdout is not None:
            process.stdout.close()


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    raise click.ClickException(f"{url} did not become ready")


def _talk(api: Api, session_id: str, turns: list[tuple[str, str]]) -> None:
    for role, content in turns:
        posted = api.call(
            "POST",
            f"/agents-api/sessions/{session_id}/messages",
            {"role": role, "content": content},
        )
        click.echo(f"  {role:>9}: {content}")
        if posted["driftEvaluationEnqueued"]:
            click.echo("             ↳ 10th message: heartbeat drift evaluation enqueued (R26)")


def _wait_evaluations(api: Api, topic_id: str, count: int = 1) -> list[Any]:
    deadline = time.monotonic() + SUMMARY_TIMEOUT_S
    while True:
        rows = api.call("GET", f"/agents-api/topics/{topic_id}/evaluations")["evaluations"]
        if len(rows) >= count:
            return list(rows)
        if time.monotonic() > deadline:
            raise click.ClickException("no evaluation arrived; is the worker running?")
        time.sleep(0.3)


def _wait_summarized(api: Api, topic_ids: list[str]) -> list[Any]:
    deadline = time.monotonic() + SUMMARY_TIMEOUT_S
    while True:
        topics = [api.call("GET", f"/agents-api/topics/{tid}") for tid in topic_ids]
        if all(t["summarizedAt"] for t in topics):
            return topics
        if time.monotonic() > deadline:
            raise click.ClickException("the worker did not summarize in time; is it running?")
        time.sleep(0.3)


def run_demo(api: Api) -> None:
    agent, user = "demo-planner", f"ada-{uuid.uuid4().hex[:6]}"
    soul = "You are Planner: terse, exact, and you remember decisions."
    api.call("PUT", f"/agents-api/agents/{agent}", {"soul": soul, "skills": ["billing"]})
    click.secho(f"Session 1 (agent {agent}, user {user})", bold=True)
    first = api.call("POST", "/agents-api/sessions", {"agentId": agent, "userId": user})
    sid, billing = first["id"], first["activeTopicId"]
    _talk(api, sid, DECISIONS)
    tool = api.call(
        "POST",
        f"/agents-api/sessions/{sid}/tools/important_info",
        {"arguments": {"op": "$set", "key": "billing_deadline", "value": "Friday"}},
    )
    click.echo(f"  tool important_info $set billing_deadline → ok={tool['ok']}")
    _talk(api, sid, HIKE)

    [evaluation] = _wait_evaluations(api, billing)
    topics = api.call("GET", f"/agents-api/sessions/{sid}")["topics"]
    if evaluation["outcome"] == "fork":
        prior, new = topics[0], topics[-1]
        click.secho("\nSilent fork (drift detected by the worker, the user saw nothing)", bold=True)
        click.echo(f"  {prior['title']!r} ({prior['messageCount']} messages, closed, summarized)")
        click.echo(f"  → {new['title']!r} ({new['messageCount']} messages moved, now active)")
    else:
        click.echo(f"\n  heartbeat evaluation: {evaluation['outcome']} (no drift detected)")

    click.secho("\nLeaving the page: three exit triggers in a burst", bold=True)
    active = api.call("GET", f"/agents-api/sessions/{sid}")["activeTopicId"]
    before = len(api.call("GET", f"/agents-api/topics/{active}/evaluations")["evaluations"])
    for trigger in ("visibility", "disconnect", "navigation"):
        status = api.call("POST", f"/agents-api/sessions/{sid}/evaluate", {"trigger": trigger})
        click.echo(f"  POST evaluate {trigger:<10} → 202 {status['status']}")
    rows = _wait_evaluations(api, active, before + 1)
    time.sleep(1.0)  # were there another, it would have arrived by now
    rows = api.call("GET", f"/agents-api/topics/{active}/evaluations")["evaluations"]
    click.echo(
        f"  → {len(rows) - before} evaluation, {rows[-1]['outcome']}, ~2 s after the last trigger"
    )
    again = api.call("POST", f"/agents-api/sessions/{sid}/evaluate", {"trigger": "visibility"})
    click.echo(f"  one more trigger, nothing new said → 202 {again['status']} (R28)")

    api.call("POST", f"/agents-api/sessions/{sid}/topics", {"title": "Chat"})
    _talk(api, sid, SMALL_TALK)
    api.call("POST", f"/agents-api/sessions/{sid}/topics", {})

    click.secho("\nJust-in-time summaries (by the worker)", bold=True)
    closed = [t["id"] for t in api.call("GET", f"/agents-api/sessions/{sid}")["topics"]][:-1]
    for t in _wait_summarized(api, closed):
        verdict = "PROMOTED to memory" if t["keepInMemory"] else "stays in the session"
        click.echo(
            f"  [{t['summarySource']}] {t['title']!r} — {t['messageCount']} messages — {verdict}"
        )
        click.echo(f"      {t['summary']}")

    click.secho("\nSession 2: what the agent remembers", bold=True)
    memory = api.call("GET", f"/agents-api/memory?agentId={agent}&userId={user}")
    for entry in memory["entries"]:
        line = (
            f"[DEPRECATED] {entry['title']}"
            if entry["deprecated"]
            else f"{entry['title']}: {entry['summary']}"
        )
        click.echo(f"  memory  {line}")
    click.echo(f"  ({memory['tokens']} tokens, {memory['dropped']} dropped)")
    facts = api.call("GET", f"/agents-api/facts?agentId={agent}&userId={user}")
    click.echo(f"  facts   {json.dumps(facts['facts'], sort_keys=True)}")

    second = api.call("POST", "/agents-api/sessions", {"agentId": agent, "userId": user})
    api.call(
        "POST",
        f"/agents-api/sessions/{second['id']}/messages",
        {"role": "user", "content": "Where were we on billing?"},
    )
    context = api.call("GET", f"/agents-api/sessions/{second['id']}/context")
    click.secho("\nThe assembled context of its first turn", bold=True)
    tokens = context["tokens"]
    click.echo(
        f"  {len(context['messages'])} messages; tokens: stable {tokens['stable']},"
        f" semi-stable {tokens['semiStable']}, volatile {tokens['volatile']};"
        f" stable prefix sha256 {context['stablePrefixHash'][:16]}…"
    )
    for line in context["messages"][0]["content"].splitlines():
        click.echo(f"  | {line}")
