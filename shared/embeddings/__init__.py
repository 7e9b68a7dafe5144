"""Recall by meaning: texts' vectors from an embeddings server (provider.py), a search
query's under a short deadline (query.py)."""
