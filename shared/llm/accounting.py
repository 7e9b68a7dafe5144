"""What a provider does with each call it made: count it, then tell the usage ledger."""

from __future__ import annotations

from shared.infra.metrics import OWN_MODEL, record_llm_call
from shared.llm.base import CallListener, LLMCall


def account(call: LLMCall, *, seconds: float, listener: CallListener | None) -> None:
    """Count `call` in the metrics (by model and purpose), then hand it to
    `listener`: right after the call, so a call the provider counted is recorded even
    when the caller's own write fails later. An org's own model is counted as OWN_MODEL:
    a label's values must stay few, and its name is the org's to choose."""
    record_llm_call(
        model=OWN_MODEL if call.own_model else call.model,
        purpose=call.purpose,
        seconds=seconds,
        prompt_tokens=call.usage.prompt_tokens,
        completion_tokens=call.usage.completion_tokens,
        failed=call.failed,
    )
    if listener is not None:
        listener(call)
