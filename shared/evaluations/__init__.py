"""The audit row of every evaluation or summarization of a topic."""
