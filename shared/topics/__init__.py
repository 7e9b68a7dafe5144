"""Topics: coherent lines of work inside a session, each with its own thread and memory flags."""
