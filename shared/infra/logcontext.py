"""Ids bound to the work in progress (a request, a task), added to every log record.

Context variables, so concurrent requests in threads (gunicorn --threads) and tasks in a
thread pool each see their own ids. The web binds request_id (and topic_id when the
route names one); the worker binds task_id and topic_id. `LogContextFilter` on a handler
copies whatever is bound onto each record it handles.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token

from opentelemetry import trace

FIELDS = ("request_id", "task_id", "topic_id")

_VARIABLES: dict[str, ContextVar[str | None]] = {
    name: ContextVar(f"driftless_{name}", default=None) for name in FIELDS
}

Bound = dict[str, Token[str | None]]


def bind(**ids: object) -> Bound:
    """Bind ids (None leaves a field as it is); returns what `unbind` needs to undo it."""
    unknown = set(ids) - set(FIELDS)
    if unknown:
        raise TypeError(f"unknown log context field(s): {sorted(unknown)}")
    return {
        name: _VARIABLES[name].set(str(value)) for name, value in ids.items() if value is not None
    }


def unbind(tokens: Bound) -> None:
    """Restore what was bound before the matching `bind`."""
    for name, token in tokens.items():
        _VARIABLES[name].reset(token)


def clear() -> None:
    """Forget every id: a pool thread starting its next task must not carry the last one's."""
    for variable in _VARIABLES.values():
        variable.set(None)


@contextmanager
def bound(**ids: object) -> Iterator[None]:
    tokens = bind(**ids)
    try:
        yield
    finally:
        unbind(tokens)


def current() -> dict[str, str]:
    """The ids bound now, by field name."""
    values = {name: variable.get() for name, variable in _VARIABLES.items()}
    return {name: value for name, value in values.items() if value is not None}


# The trace a line was written in, when traced (shared/infra/tracing.py): a line leads to its
# trace and a trace to its lines, across the web and the worker.
TRACE_ID = "trace_id"


class LogContextFilter(logging.Filter):
    """Copies the bound ids onto each record (attributes absent when nothing is bound), and
    the id of the sampled trace it was written in, if any."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in current().items():
            setattr(record, name, value)
        span = trace.get_current_span().get_span_context()
        if span.is_valid and span.trace_flags.sampled:
            setattr(record, TRACE_ID, trace.format_trace_id(span.trace_id))
        return True
