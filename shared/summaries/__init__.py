"""Just-in-time summarization of topics (R9–R14, R24)."""
