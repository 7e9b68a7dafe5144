"""Orgs and their API keys."""
