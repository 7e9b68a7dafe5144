"""The driftless domain: one package per feature (topics, memory, facts, triggers, ...),
the vocabulary they share (domain/) and the plumbing they lean on (infra/).

Both the web app and the worker import this package; it imports neither of them.
"""
