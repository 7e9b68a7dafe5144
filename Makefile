# driftless — `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash

VENV ?= .venv
BIN := $(VENV)/bin
PYTHON ?= python3
INSTALLED := $(VENV)/.installed

.PHONY: help install run test test-unit lint fmt bench clean

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F ':.*?## ' '{printf "  %-12s %s\n", $$1, $$2}'

install: $(INSTALLED) ## Create the virtualenv and install driftless, its dev tools and the client

$(INSTALLED): pyproject.toml client/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e ".[dev,embedded]"
	$(BIN)/pip install --quiet --disable-pip-version-check -e ./client
	touch $@

run: install ## Start web, worker and beat (embedded PostgreSQL/Redis unless DATABASE_URL/REDIS_URL are set)
	$(BIN)/driftless up

test: install ## Run the whole suite on real PostgreSQL, Redis and a real Celery worker
	$(BIN)/pytest

test-unit: install ## Only the pure unit tests (no services needed)
	$(BIN)/pytest tests/unit

lint: install ## ruff, mypy (strict on shared/ and the client), import contracts
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy --strict shared
	$(BIN)/mypy --strict client/driftless_client
	$(BIN)/mypy web worker bench
	$(BIN)/lint-imports

bench: install ## Run the benchmarks (bench/*.py) against the machine's PostgreSQL and Redis
	$(BIN)/python -m bench.context
	$(BIN)/python -m bench.prefix_reuse --quiet
	$(BIN)/python -m bench.debounce
	$(BIN)/python -m bench.http_throughput --server both
	$(BIN)/python -m bench.batch_import
	$(BIN)/python -m bench.turn
	$(BIN)/python -m bench.streams
	$(BIN)/python -m bench.enqueue
	$(BIN)/python -m bench.worker_pool
	$(BIN)/python -m bench.token_economy

fmt: install ## Format and autofix
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean: ## Remove the virtualenvs (.venv/, the local embeddings' .venv-embed/) and the embedded servers' data (.driftless/)
	-[ -f .driftless/redis/redis.pid ] && kill $$(cat .driftless/redis/redis.pid) 2>/dev/null
	rm -rf $(VENV) .venv-embed .driftless .pytest_cache .mypy_cache .ruff_cache
