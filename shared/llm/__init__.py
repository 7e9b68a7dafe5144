"""LLM access: a small protocol, the OpenAI-compatible provider and the offline `local` one."""
