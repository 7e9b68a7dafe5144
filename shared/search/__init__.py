"""Recall: full-text search of a scope's topics and messages, across its sessions."""
