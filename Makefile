# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# What `make run` needs: the service and the OpenStack CLI of the README's tour, no test
# or bench tools.
RUN_STAMP := $(VENV)/.installed-run
# `make run` listens where HOST and PORT say (default: [api] host_ip and port of the
# configuration, 127.0.0.1:6666) and keeps its state in DATA_DIR.
DATA_DIR ?= data
HOST ?=
PORT ?=
# pytest-xdist workers for `make test` and `make check`: two per core, at most 8 (many
# tests wait on a server, a timeout or another thread: a second worker per core fills
# those waits; on 2 cores 4 workers took `make test` from 4 min 26 s to 3 min 43 s).
WORKERS ?= $(shell $(PYTHON) -c 'import os; print(min(2 * (os.cpu_count() or 1), 8))')
# Examples per API operation in the schemathesis fuzz test: CI's depth, and the short pass.
FUZZ_EXAMPLES ?= 40
CHECK_FUZZ_EXAMPLES ?= 5
# The tests `make check` runs: not those that start servers or run the real Placement
# (CHECK_MARKERS="not slow" takes the Placement tests in too).
CHECK_MARKERS ?= not slow and not placement

# Python may write its bytecode (and pytest its rewritten test modules) even where the
# environment says not to: without them every pytest worker compiles the whole tree again
# (8 s of CPU each for `make check`'s collection).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test check install-check release release-check lint typecheck hooks lock docs clean cloud cloud-stop cloud-lock e2e e2e-flat e2e-ha e2e-cyborg e2e-upgrade

$(BIN)/uv:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check uv

$(RUN_STAMP): pyproject.toml requirements.lock | $(BIN)/uv
	$(BIN)/uv pip install -q --python $(BIN)/python -c requirements.lock -e '.[client]'
	touch $@

$(STAMP): pyproject.toml requirements.lock | $(BIN)/uv
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -c requirements.lock \
	  -e '.[client,test,bench]'
	touch $@ $(RUN_STAMP)

## Set up and run Acceleron on the embedded default (SQLite in ./data, noauth, 127.0.0.1:6666).
run: $(RUN_STAMP)
	$(BIN)/acceleron all-in-one --data-dir $(DATA_DIR)$(if $(HOST), --host $(HOST))$(if $(PORT), --port $(PORT))

## Set up and run every check CI runs: lint, format, types and the whole test suite
## (in parallel: one database of each backend per worker).
test: $(STAMP) lint typecheck
	ACCELERON_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest -n $(WORKERS) --dist worksteal

## The inner loop (about a minute on 2 cores): lint, format, and the tests on SQLite that
## start no servers and no Placement, with a short fuzz pass. `make test` before pushing.
check: $(STAMP) lint
	ACCELERON_TEST_DATABASES=sqlite ACCELERON_FUZZ_EXAMPLES=$(CHECK_FUZZ_EXAMPLES) \
	  $(BIN)/pytest -q -n $(WORKERS) --dist worksteal -m "$(CHECK_MARKERS)"

## The documented install: a wheel, installed with no extras into a clean virtualenv,
## starts the all-in-one and serves a device profile (.ci/install-check).
install-check: | $(BIN)/uv
	bash .ci/install-check

## A release's sdist and wheel in dist/, built from the release commit (HEAD, clean) once
## its version, CHANGELOG section and docs/install.md agree (CONTRIBUTING.md, "Releases").
release: $(RUN_STAMP)
	$(BIN)/python .ci/release.py --out dist

## The same on any commit, in RELEASE_OUT (a new temporary directory by default), as CI
## runs it: a release commit is checked as by `make release`; any other (a .dev version)
## needs its Unreleased section. Both build HEAD as committed.
release-check: $(RUN_STAMP)
	$(BIN)/python .ci/release.py --check --out $(or $(RELEASE_OUT),$(shell mktemp -d))

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

## Install the git hook that runs ruff and mypy on each commit (.pre-commit-config.yaml).
hooks: $(STAMP)
	$(BIN)/pre-commit install

## Regenerate the pinned dependency set after editing pyproject.toml.
lock:
	test -x $(BIN)/uv || ($(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install -q uv)
	$(BIN)/uv pip compile -q --python-version 3.11 --extra client --extra test --extra bench pyproject.toml \
	  -o requirements.lock

## Regenerate what the docs take from the code: API reference, OpenAPI schema, samples.
docs: $(STAMP)
	$(BIN)/acceleron api reference > docs/api/reference.md
	$(BIN)/acceleron api reference --openapi > docs/api/openapi.json
	$(BIN)/acceleron config sample > etc/acceleron.conf.sample
	$(BIN)/acceleron policy defaults > etc/policy.yaml.sample

## The reference cloud on 127.0.0.1: Keystone, Placement, Glance, Nova (two fake computes),
## Acceleron (two API replicas, an agent per compute). docs/deploy-with-nova.md.
## ACCELERATOR=cyborg runs upstream Cyborg (API, conductor, an agent per compute with its
## fake driver) as the accelerator service instead.
ACCELERATOR ?= acceleron
cloud: $(STAMP)
	$(BIN)/python -m cloud up$(if $(filter cyborg,$(ACCELERATOR)), --cyborg)

cloud-stop: $(STAMP)
	$(BIN)/python -m cloud down

## The end-to-end suite against the reference cloud (started and stopped around it,
## unless one is already running: then it is used and left running).
e2e: $(STAMP)
	$(BIN)/python -m cloud e2e

## The flat-mode end-to-end test (spec 001's fallback: [placement] nested = false) in a
## flat reference cloud of its own, then the move to nested providers.
e2e-flat: $(STAMP)
	$(BIN)/python -m cloud e2e --flat

## Nova boots servers with accelerators through upstream Cyborg (tests/e2e/test_cyborg.py),
## in a reference cloud of its own that runs Cyborg instead of Acceleron.
e2e-cyborg: $(STAMP)
	$(BIN)/python -m cloud e2e --cyborg

## A rolling upgrade under load (tests/e2e/test_upgrade.py), in a reference cloud of its
## own started on the previous release (its files and its own locked virtualenv): expand,
## API replica 1, replica 2, the agents, contract, while servers with accelerators boot
## and claims are made; prints the tallies. docs/install.md, "Upgrades".
e2e-upgrade: $(STAMP)
	$(BIN)/python -m cloud e2e --upgrade

## The database failing over under load (no Nova): a three-node MariaDB Galera cluster
## behind a one-writer balancer with its writer killed, and a PostgreSQL server restarted;
## prints the figures (seconds of 503, transactions retried, binds lost). About 40 s on
## 2 cores, so `make test` runs it too. docs/install.md, "A database that fails over".
e2e-ha: $(STAMP)
	$(BIN)/pytest -q -s -p no:cacheprovider \
	  tests/functional/test_database_failover.py

## Regenerate the OpenStack services' locks (cloud/requirements/*.txt) from their .in files.
cloud-lock:
	for name in keystone placement glance nova tempest cyborg barbican; do \
	  (cd cloud/requirements && ../../$(BIN)/uv pip compile -q --python-version 3.11 \
	    $$name.in -o $$name.txt); done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .cloud
