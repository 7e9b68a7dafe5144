"""Blueprints. Each view parses, calls one service function inside a unit of work, serializes."""
