"""Integration tests: running it: CLI, pools, metrics, logs, migrations, PgBouncer, routing."""
