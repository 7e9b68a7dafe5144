"""Retention: idle sessions lose their raw messages and archived notes, keep their topics."""
