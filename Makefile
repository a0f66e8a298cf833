# nsj_queue_lib: build, test and run helpers.
#
# Every target that runs Python bootstraps its own virtual environment first
# (VENV, default .venv), so a fresh clone needs one command per task:
#
#     make test      # the test suite (embedded PostgreSQL when TEST_PG_DSN is unset)
#     make check     # lint, format check and type check (what CI runs first)
#     make demo      # enqueue a few tasks and watch a worker settle them
#     make docs      # build the documentation site into site/ (warnings fail it)
#
# `make help` (the default target) lists every target; a target documents
# itself with a `## text` comment on its rule line.

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON      ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
# The venv is (re)installed when this stamp is older than pyproject.toml.
STAMP       := $(VENV)/.installed-test
# The docs extra (mkdocs and its plugins) is installed on top, by `make docs` only.
DOCS_STAMP  := $(VENV)/.installed-docs
# The release extra (build, twine) is installed on top, by `make release-check` only.
RELEASE_STAMP := $(VENV)/.installed-release
# The bench extra (pgqueuer, asyncpg) is installed on top, by `make bench` only.
BENCH_STAMP := $(VENV)/.installed-bench
PYTEST_ARGS ?=
# make test's worker processes (pytest-xdist). The suite mostly waits on sleeps,
# subprocesses and databases, so more workers than cores pays; XDIST=0 runs it
# serially in one process (as does PYTEST_ARGS='-n0'). Tests that must not run
# beside each other share an xdist_group (docs/development/testing.md).
XDIST       ?= 4
XDIST_ARGS  := $(if $(filter 0,$(XDIST)),,-n $(XDIST) --dist loadgroup)
# Set to 1 to treat "pytest collected no tests" (exit 5) as success.
ALLOW_NO_TESTS ?= 0
# Options of scripts/mutants.py (make mutants), e.g. MUTANTS_ARGS='-k purge --jobs 2'.
MUTANTS_ARGS ?=

# The example queue whose DDL is kept in database/<dialect>/fila_teste.sql.
DDL_SCHEMA   ?= public
DDL_QUEUE    ?= fila_teste
DDL_DIALECTS ?= postgres mysql singlestore

COMPOSE ?= docker compose

.PHONY: help venv test docs mutants demo bench release-check verify-ddl ddl env clean distclean lint format typecheck check \
        compose-build compose-up compose-down compose-test compose-logs compose-config

help: ## List the targets (this text)
	@echo "Usage: make <target> [VAR=value ...]"
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_.-]+:.*## / {printf "  %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo "Variables: PYTEST_ARGS='-k name -x' XDIST=4 (make test; XDIST=0: serial), VENV=$(VENV), PYTHON=$(PYTHON),"
	@echo "           TEST_PG_DSN / TEST_MYSQL_DSN / CI=true (see docs/development/testing.md)."

$(STAMP): pyproject.toml
	@if ! $(PY) -c 'import sys' >/dev/null 2>&1; then \
		echo ">> creating $(VENV)"; \
		rm -rf "$(VENV)"; \
		$(PYTHON) -m venv "$(VENV)"; \
	fi
	@echo ">> installing nsj_queue_lib (editable) with the test, lint, django and otel extras into $(VENV)"
	$(PY) -m pip install --quiet -e '.[test,lint,django,otel]'
	@touch "$@"

venv: $(STAMP) ## Create or refresh the virtual environment (.venv) with the test extra

test: $(STAMP) ## Run the test suite (pass options with PYTEST_ARGS='...')
	@rc=0; $(PY) -m pytest -q $(XDIST_ARGS) $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ] && [ "$(ALLOW_NO_TESTS)" = "1" ]; then \
		echo ">> pytest collected no tests (exit 5), accepted because ALLOW_NO_TESTS=1"; rc=0; \
	fi; \
	exit $$rc

$(DOCS_STAMP): pyproject.toml $(STAMP)
	@echo ">> installing the docs extra into $(VENV)"
	$(PY) -m pip install --quiet -e '.[docs]'
	@touch "$@"

# --strict (also set in mkdocs.yml): any warning, such as a broken link or
# anchor, fails the build. The API reference is read from the code (mkdocstrings).
docs: $(DOCS_STAMP) ## Build the documentation site into site/ (mkdocs build --strict)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

$(RELEASE_STAMP): pyproject.toml $(STAMP)
	@echo ">> installing the release extra into $(VENV)"
	$(PY) -m pip install --quiet -e '.[release]'
	@touch "$@"

release-check: $(RELEASE_STAMP) ## Build the sdist and the wheel, twine-check them, install the wheel in a clean venv and run the quick start
	$(PY) scripts/release_check.py

# Not part of CI (minutes on 2 cores); needs TEST_PG_DSN and TEST_MYSQL_DSN as for `make test`.
mutants: $(STAMP) ## Plant one-line bugs one at a time and check the tests catch each (scripts/mutants.py)
	$(PY) scripts/mutants.py $(MUTANTS_ARGS)

# The trees the static checks cover.
LINT_PATHS := nsj_queue_lib tests benchmarks examples scripts

lint: $(STAMP) ## ruff: lint rules and format check (pyproject.toml [tool.ruff])
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)

format: $(STAMP) ## ruff: apply the formatter and the safe lint fixes
	$(VENV)/bin/ruff format $(LINT_PATHS)
	$(VENV)/bin/ruff check --fix $(LINT_PATHS)

typecheck: $(STAMP) ## mypy: strict on the public API, check_untyped_defs elsewhere (pyproject.toml [tool.mypy])
	$(VENV)/bin/mypy

check: lint typecheck ## lint and typecheck

demo: $(STAMP) ## Run examples/demo.py: enqueue tasks, run a worker, print the rows
	@test -f examples/demo.py || { echo "examples/demo.py does not exist yet" >&2; exit 1; }
	$(PY) examples/demo.py

$(BENCH_STAMP): pyproject.toml $(STAMP)
	@echo ">> installing the bench extra into $(VENV)"
	$(PY) -m pip install --quiet -e '.[bench]'
	@touch "$@"

bench: $(BENCH_STAMP) ## Run the benchmarks (PostgreSQL; vs pgqueuer; PostgreSQL vs MariaDB; QUEUE_COMPAT_1_2_2 on vs off; lock_key cost; per-processo limits; async handlers)
	$(PY) benchmarks/bench_pgqueuer.py
	$(PY) benchmarks/run_all.py
	$(PY) benchmarks/bench_mysql.py
	$(PY) benchmarks/bench_compat.py --rounds 5
	$(PY) benchmarks/bench_flow.py --rounds 3
	$(PY) benchmarks/bench_limits.py --rounds 3
	$(PY) benchmarks/bench_async.py

verify-ddl: $(STAMP) ## Fail when database/<dialect>/fila_teste.sql differs from db_gen's output
	@PYTHON="$(PY)" scripts/ddl.sh check "$(DDL_SCHEMA)" "$(DDL_QUEUE)" $(DDL_DIALECTS)

ddl: $(STAMP) ## Regenerate database/<dialect>/fila_teste.sql with db_gen
	@PYTHON="$(PY)" scripts/ddl.sh write "$(DDL_SCHEMA)" "$(DDL_QUEUE)" $(DDL_DIALECTS)

env: ## Create .env from .env.dist (never overwrites an existing .env)
	@if [ -e .env ]; then echo ".env already exists; compare it with .env.dist"; \
	else cp .env.dist .env && echo "created .env from .env.dist"; fi

clean: ## Remove caches, build output and demo data (keeps .venv)
	rm -rf build dist site .pytest_cache .demo *.egg-info
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +

distclean: clean ## clean, and remove the virtual environment too
	rm -rf "$(VENV)"

# --- Docker Compose (needs a Docker engine; see docker-compose.yml) ---------

compose-config: ## Validate and print docker-compose.yml as Compose resolves it
	$(COMPOSE) config

compose-build: ## Build the image the workers, server and tests run in
	$(COMPOSE) build

compose-up: ## Start postgres, mariadb and the example workers in the background
	$(COMPOSE) up -d postgres mariadb worker worker_pubsub worker_webhook

compose-test: ## Run the test suite in a container against the compose databases
	$(COMPOSE) run --rm tests

compose-logs: ## Follow the logs of the compose services
	$(COMPOSE) logs -f

compose-down: ## Stop and remove the compose services and their volumes
	$(COMPOSE) down -v
