"""Webhooks: an outbox of events, subscriptions per org, signed deliveries with retries."""
