"""The fleet trial a job holds (shared/infra/fair.py), ended once its call is granted.

At a refill of the fleet's model quota, every ticket that pops a job of an org the quota
refused lately would race the others to the bucket, and a warm job beats the job of the
org whose turn it is. So the first such job popped takes the lane's trial: the other
marked orgs yield their turn until the trial ends. It ends when the fleet's rate limit
grants the job's call (shared/llm/ratelimit.py calls `granted`), or when the job ends
(worker/fair.py), whichever comes first; a refusal replaces it with the quota's wait.
The job's greenlet (or thread) carries it: a context variable, as Celery's gevent pool
runs each task in a greenlet of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_END: ContextVar[Callable[[], None] | None] = ContextVar("fleet_trial_end", default=None)


@contextmanager
def holding(end: Callable[[], None]) -> Iterator[None]:
    """Run a job that holds a trial: `end` is called once, at its grant or its end."""
    ended = False

    def end_once() -> None:
        nonlocal ended
        if not ended:
            ended = True
            end()

    token = _END.set(end_once)
    try:
        yield
    finally:
        _END.reset(token)
        end_once()


def granted() -> None:
    """The fleet's bucket granted this job's call: end its trial, if it holds one."""
    end = _END.get()
    if end is not None:
        end()
