"""bench/prefix_reuse: how much of each turn's prompt a provider's prefix cache can reuse.

Replays a scripted 200-turn conversation over 4 topics (the local provider summarizes
each closed topic, as the worker would) twice: with the block-trimming window and with
the plain sliding window. For every turn it prints the share of the prompt's tokens
that are identical to the previous turn's prompt prefix (longest common prefix of the
rendered messages), then the means.

    .venv/bin/python -m bench.prefix_reuse [--quiet]
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

from bench.common import BenchEnv, arguments, bench_env
from shared.auth.service import org_for_key
from shared.context.render import canonical_json, render
from shared.context.service import ContextOptions, assemble_context
from shared.context.window import WindowMode
from shared.evaluations.summarize import summarize_topic
from shared.llm.local_provider import LocalProvider
from shared.sessions.service import create_session, open_topic, post_message
from shared.tools.service import execute_tool

TURNS = 200
TOPICS = [
    ("billing", ["PostgreSQL", "invoices", "Celery", "retries", "EUR", "migration", "ledger"]),
    ("hiking", ["trail", "Dolomites", "hut", "boots", "permits", "altitude", "weather"]),
    ("sourdough", ["starter", "hydration", "levain", "crumb", "proof", "oven", "flour"]),
    ("taxes", ["deduction", "receipts", "deadline", "accountant", "VAT", "filing", "refund"]),
]
TURNS_PER_TOPIC = TURNS // len(TOPICS)


@dataclass(frozen=True)
class Turn:
    turn: int
    topic: str
    share: float
    prompt_tokens: int


def _sentence(rng: random.Random, words: list[str], speaker: str) -> str:
    picked = rng.sample(words, 3)
    if speaker == "user":
        return (
            f"What about the {picked[0]} and the {picked[1]}?"
            f" I prefer keeping the {picked[2]} simple."
        )
    return (
        f"Noted: the {picked[0]} depends on the {picked[1]}; we will decide the {picked[2]} next."
    )


def _common_prefix(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    i = 0
    while i < limit and a[i] == b[i]:
        i += 1
    return i


def replay(env: BenchEnv, mode: WindowMode) -> list[Turn]:
    rng = random.Random(7)
    options = ContextOptions(window_mode=mode)
    llm = LocalProvider()
    with env.uow() as uow:
        org_id = org_for_key(uow=uow, key=env.org_key)
        assert org_id is not None
        session_id = create_session(
            uow=uow, org_id=org_id, agent_id="replayer", user_id=f"{mode}-{uuid.uuid4().hex[:6]}"
        ).session.id
        uow.commit()
    previous, turns = "", []
    for turn in range(TURNS):
        topic_name, words = TOPICS[turn // TURNS_PER_TOPIC]
        if turn and turn % TURNS_PER_TOPIC == 0:
            with env.uow() as uow:
                open_topic(uow=uow, org_id=org_id, session_id=session_id, title=None)
                uow.commit()
                closed = uuid.UUID(uow.sent[0].kwargs["topic_id"])
            summarize_topic(new_uow=env.uow, llm=llm, topic_id=closed, trigger="topic_closed")
        with env.uow() as uow:
            post_message(
                uow=uow, org_id=org_id, session_id=session_id, role="user",
                content=_sentence(rng, words, "user"),
            )  # fmt: skip
            if turn % 10 == 3:  # the agent logs a decision in its notes now and then
                execute_tool(
                    uow=uow, org_id=org_id, session_id=session_id, name="notes",
                    arguments={"op": "$set", "content": f"decided: {rng.choice(words)}"},
                    tool_call_id=None,
                )  # fmt: skip
            uow.commit()
        with env.uow() as uow:
            stack = assemble_context(
                uow=uow, client=env.redis, org_id=org_id, session_id=session_id, options=options
            )
        prompt = "\n".join(canonical_json(m) for m in render(stack).messages)
        share = _common_prefix(previous, prompt) / len(prompt)
        turns.append(Turn(turn, topic_name, share, len(prompt) // 4))
        previous = prompt
        with env.uow() as uow:
            post_message(
                uow=uow, org_id=org_id, session_id=session_id, role="assistant",
                content=_sentence(rng, words, "assistant"),
            )  # fmt: skip
            uow.commit()
    return turns


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--quiet", action="store_true", help="only the means")
    args = parser.parse_args()
    env = bench_env(args.admin_database_url)
    block, sliding = replay(env, "block"), replay(env, "sliding")
    if not args.quiet:
        print(f"{'turn':>4}  {'topic':<10} {'tokens':>6}  {'block':>6}  {'sliding':>7}")
        for b, s in zip(block, sliding, strict=True):
            print(
                f"{b.turn:>4}  {b.topic:<10} {b.prompt_tokens:>6}  {b.share:6.1%}  {s.share:7.1%}"
            )
    for name, turns in (("block", block), ("sliding", sliding)):
        mean = sum(t.share for t in turns[1:]) / (len(turns) - 1)
        reused = sum(t.share * t.prompt_tokens for t in turns[1:])
        total = sum(t.prompt_tokens for t in turns[1:])
        print(
            f"{name:<8} mean share of the prompt reusable from the previous turn: {mean:.1%}"
            f"   (token-weighted {reused / total:.1%}, {total:,} prompt tokens in all)"
        )


if __name__ == "__main__":
    main()
