# The two commands a person needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench docs docs-serve clean system-packages postgres

SERVE_STAMP := $(VENV)/.installed-server

# Everything: the tests, lint, docs, every store and front (pyspark included).
# uv installs what pip would (the same versions), in 22 s where pip took 50 (a fresh clone,
# caches warm); it comes from PyPI through pip, into the venv. --compile-bytecode: pip
# compiles what it installs and uv does not by default; without .pyc files every Python
# process the tests start (servers, workers, Spark's Python workers) compiles its imports.
# Spark's Python processes import pyspark from the zip in pyspark's python/lib, not from
# site-packages: tools/pyspark_zip_bytecode.py adds bytecode to it (docs/development.md).
UV_INSTALL := $(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet uv
	$(UV_INSTALL) -e '.[dev,server,client,spark,postgres,resp,docs,jobs]'
	$(PY) tools/pyspark_zip_bytecode.py
	touch $(STAMP)

# What serving needs, no more: tidelog with its server extra (HTTP, Redis and Kafka fronts, the command).
$(SERVE_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet uv
	$(UV_INSTALL) -e '.[server]'
	touch $(SERVE_STAMP)

# make run PORT=8080 REDIS_PORT=6380 KAFKA_PORT=9093 DB=/tmp/other.db (0 turns Redis or Kafka off).
PORT       ?= 7070
REDIS_PORT ?= 7379
KAFKA_PORT ?= 9092
DB         ?= ./tidelog.db

# The ports are checked before anything is installed: one line, and make stops. The
# database path is checked by tidelog serve, before it creates anything.
ifneq ($(filter run,$(MAKECMDGOALS)),)
not_a_port = $(shell v='$(1)'; case "$$v" in (''|*[!0-9]*) echo bad ;; (*) [ "$$v" -le 65535 ] || echo bad ;; esac)
$(foreach p,PORT REDIS_PORT KAFKA_PORT,$(if $(call not_a_port,$($(p))),$(error make run: $(p) must be a port number from 0 to 65535, not '$($(p))')))
endif

run: $(SERVE_STAMP)
	$(VENV)/bin/tidelog serve --db '$(DB)' --host 127.0.0.1 --port $(PORT) --resp-port $(REDIS_PORT) --kafka-port $(KAFKA_PORT)

lint: $(STAMP)
	$(VENV)/bin/ruff check --output-format concise src tests bench examples tools docs/gen_pages.py
	$(VENV)/bin/ruff format --check src tests bench examples tools docs/gen_pages.py
	$(VENV)/bin/mypy  # strict on the core and the stores, checked-untyped elsewhere (pyproject.toml)

# The whole suite, every tier, in one run on TEST_WORKERS pytest-xdist workers: the
# suite mostly waits (servers, leases, processes), so more workers than cores overlap
# it. The Spark and slow tiers start first (tests/tiers.py); the fronts' tests run on a
# server thread and on `tidelog serve --workers 2` (tests/conftest.py). docs/development.md.
# TEST_ARGS: what to run instead of everything (`make test TEST_ARGS="-m 'not spark'"`).
# PYTHONDONTWRITEBYTECODE is emptied (unset, to Python) for the run: set, every process
# compiles tidelog and the tests again (and pytest rewrites every test module's asserts
# in each of its workers) where a .pyc written once would do.
TEST_WORKERS ?= 4
TEST_ARGS ?=

# The commands the tests run that pip cannot install (chromium, kcat, redis-cli, ...): from
# Debian's packages when missing (tools/system-packages.sh); nothing when all are there.
system-packages:
	sh tools/system-packages.sh

# The PostgreSQL server the tests use, installed, configured and started when missing
# (tools/postgres.sh); nothing when postgresql://postgres@127.0.0.1:5432/test answers.
postgres:
	sh tools/postgres.sh

test: lint system-packages postgres
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n $(TEST_WORKERS) --durations=20 $(TEST_ARGS)

bench: $(STAMP) postgres
	sh tools/system-packages.sh bench
	$(UV_INSTALL) -e '.[bench]'
	$(PY) bench/core.py
	$(PY) bench/aio.py
	$(PY) bench/postgres.py
	$(PY) bench/postgres_queues.py

# mkdocs and its theme print a banner about MkDocs 2 on every build; these turn it off.
MKDOCS_QUIET := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true

# The docs site into site/; --strict turns a broken link or reference into an error.
docs: $(STAMP)
	$(MKDOCS_QUIET) $(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: $(STAMP)
	$(MKDOCS_QUIET) $(VENV)/bin/mkdocs serve

clean:
	rm -rf site $(VENV) .pytest_cache .ruff_cache tidelog.db tidelog.db-wal tidelog.db-shm
