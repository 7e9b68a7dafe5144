"""The one place that turns settings into an LLM provider."""

from __future__ import annotations

from shared.config import Settings
from shared.llm.base import LLM
from shared.llm.local_provider import LocalProvider
from shared.llm.openai_provider import OpenAIProvider


def make_llm(settings: Settings) -> LLM:
    """The OpenAI-compatible provider when settings ask for it, else the offline one."""
    if settings.llm_provider == "openai":
        return OpenAIProvider(
            api_key=settings.openai_api_key,
            base_url=settings.openai_base_url,
            model=settings.llm_model,
            timeout_s=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
        )
    return LocalProvider()
