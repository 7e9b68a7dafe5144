"""The driftless domain: models, services, pure memory rules, config and adapters.

Both the web app and the worker import this package; it imports neither of them.
"""
