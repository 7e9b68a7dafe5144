"""Database plumbing: declarative base, engine factory, unit of work."""
