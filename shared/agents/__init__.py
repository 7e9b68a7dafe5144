"""Agent profiles: the soul, skills and tools that open every context stack."""
