# driftless — `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash

VENV ?= .venv
BIN := $(VENV)/bin
PYTHON ?= python3
INSTALLED := $(VENV)/.installed

# The locks (pip-tools' format, every package pinned with its hashes): dev.txt for
# `make install` (the runtime, the dev and embedded extras and the client), runtime.txt for
# deploy/Dockerfile (the runtime alone, at dev.txt's versions). `make lock` writes both.
DEV_LOCK := requirements/dev.txt
RUNTIME_LOCK := requirements/runtime.txt
LOCK_VENV := .venv-lock
# The package names of a lock or of `pip freeze` on stdin, as pip compares them (PyYAML is
# pyyaml, typing_extensions typing-extensions), sorted for comm.
PACKAGE_NAMES := grep -oE '^[A-Za-z0-9][A-Za-z0-9._-]*==' | sed 's/==$$//' | tr 'A-Z_.' 'a-z--' | LC_ALL=C sort -u
# From PyPI alone, whatever a machine's pip.conf adds (local mirrors, find-links): their
# files' hashes would otherwise land in the lock. Build requirements are locked too.
PIP_COMPILE := env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null \
	CUSTOM_COMPILE_COMMAND="make lock" \
	$(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
	--all-build-deps --no-emit-index-url --no-emit-find-links

.PHONY: help install lock run test test-unit lint fmt bench clean

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F ':.*?## ' '{printf "  %-12s %s\n", $$1, $$2}'

install: $(INSTALLED) ## Create the virtualenv and install driftless, its dev tools and the client, from the lock

# An existing venv first loses what the lock does not list (an old psycopg2-binary, a
# dropped dependency); then every package from the lock, each checked against its hashes;
# then driftless and the client themselves, editable, with no dependency resolved again
# (and built with the lock's setuptools and wheel, not fresh ones).
$(INSTALLED): pyproject.toml client/pyproject.toml $(DEV_LOCK)
	@command -v pg_config >/dev/null || { echo "make install builds psycopg2 from source: it needs pg_config and a C compiler (Debian: apt-get install libpq-dev gcc; macOS: brew install libpq, with its bin/ on PATH)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	LC_ALL=C comm -23 <($(BIN)/pip freeze --exclude-editable | $(PACKAGE_NAMES)) \
		<(< $(DEV_LOCK) $(PACKAGE_NAMES)) | xargs -r $(BIN)/pip uninstall --quiet -y
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r $(DEV_LOCK)
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
		-e . -e ./client
	touch $@

lock: ## Resolve requirements/*.txt again after a change to a pyproject.toml (keeps other pins)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet --disable-pip-version-check pip-tools==7.7.0
	$(PIP_COMPILE) --extra dev --extra embedded --output-file $(DEV_LOCK) \
		pyproject.toml client/pyproject.toml
	$(PIP_COMPILE) --constraint $(DEV_LOCK) --output-file $(RUNTIME_LOCK) pyproject.toml

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

# A left-over embedded server is one whose pid file names a live process of its kind (a
# stale file's pid may be anyone's by now): Redis stops on SIGTERM, PostgreSQL at once on
# SIGINT (fast shutdown). Each is waited for, so that none writes into what goes next.
STOP_LEFT_OVER = pid=$$(head -n 1 $(1) 2>/dev/null); \
	if [ -n "$$pid" ] && ps -p "$$pid" -o comm= | grep -q $(2); then \
		echo "stopping the embedded $(2) left running (pid $$pid)"; kill -$(3) "$$pid"; \
		for _ in $$(seq 100); do kill -0 "$$pid" 2>/dev/null || break; sleep 0.1; done; \
	fi

clean: ## Stop the embedded servers a run left, remove the virtualenvs (.venv/, the local embeddings' .venv-embed/) and the servers' data (.driftless/)
	@$(call STOP_LEFT_OVER,.driftless/redis/redis.pid,redis-server,TERM)
	@$(call STOP_LEFT_OVER,.driftless/postgres/postmaster.pid,postgres,INT)
	rm -rf $(VENV) $(LOCK_VENV) .venv-embed .driftless .pytest_cache .mypy_cache .ruff_cache
