# Two commands do all the set-up on a fresh machine (Python 3.10+, Java 17):
#   make demo   - embedded ZooKeeper, the daemon, a demo Spark job, epoch-pinned lookups
#   make test   - lint, types and the whole test suite (what CI runs)
SHELL  := /bin/bash
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo demo-chain demo-swap class-archive test test-fast constraints deploy-check compat compat-venvs zookeeper-auth lint typecheck imports docs pytest fuzz fuzz-grpc fuzz-seeds proto bench bench-routing bench-ingest bench-state-size bench-object-store bench-s3-clients bench-alignment bench-arrow clean soak

# The repository is a monorepo of distributions sharing the namespace `epochstate`, one per
# folder, each a src layout (core/src/epochstate/core/, ...); the root's pyproject.toml gathers
# them. Each is installed editable, so every tool resolves epochstate.* to its file.
DISTRIBUTIONS := proto core client cli daemon spark_plugin devtools

# With Python 3.11 (CI's, the image's) every dependency is pinned by .ci/constraints-dev.txt
# (`make constraints` writes it): pip then resolves in seconds instead of backtracking through
# releases for a minute or more. Another Python resolves from pyproject.toml's ranges alone.
# --no-compile: a module is byte-compiled when first imported, not every module of every
# dependency at install (half of pip's CPU).
DEV_PINS = $(shell $(PYTHON) -c 'import sys; print("--constraint .ci/constraints-dev.txt" if sys.version_info[:2] == (3, 11) else "")')

$(STAMP): pyproject.toml $(DISTRIBUTIONS:%=%/pyproject.toml) .ci/constraints-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile $(DEV_PINS) $(DISTRIBUTIONS:%=-e ./%) '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/epochstate demo $(DEMO_ARGS)

demo-chain: $(STAMP)
	$(BIN)/epochstate demo-chain $(DEMO_ARGS)

# v1 -> v2 of a counting job, hot-swapped while a downstream job reads its output (about a minute).
demo-swap: $(STAMP)
	$(BIN)/epochstate demo-swap $(DEMO_ARGS)

# While the static checks run (they leave a core idle), the Spark class archive is built and
# the compatibility suite's missing virtualenvs are made, in the background: pip then competes
# less with the suite's first, heaviest tests (the suite's own warm-up finds the venvs made,
# or waits on their lock), and every test JVM maps the archive. Not before the venv is made:
# that gates everything, and has the network to itself.
test: $(STAMP)
	@mkdir -p build
	@$(BIN)/python -m tests.compat.venvs > build/compat-venvs.log 2>&1 & venvs=$$!; \
	$(MAKE) --no-print-directory class-archive > build/class-archive.log 2>&1 & archive=$$!; \
	$(MAKE) --no-print-directory lint typecheck imports docs; status=$$?; \
	wait $$archive; cat build/class-archive.log; \
	if [ $$status -eq 0 ]; then $(MAKE) --no-print-directory pytest; status=$$?; fi; \
	kill $$venvs 2>/dev/null; exit $$status

# The edit loop: the static checks and the in-process tests (no JVM, server or daemon
# of their own: tests/conftest.py marks the others "process"), in a few minutes.
test-fast: lint typecheck imports
	$(BIN)/python -m pytest -m "not process" -q $(PYTEST_ARGS)

SOURCES := $(filter-out proto,$(DISTRIBUTIONS))

lint: $(STAMP)
	$(BIN)/ruff check $(SOURCES) proto/generate.py tests bench .ci
	$(BIN)/ruff format --check $(SOURCES) proto/generate.py tests bench .ci

# mypy reads its roots from pyproject.toml, import-linter its contracts from .importlinter.
typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports --no-cache

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

# The suite in this process (PYTEST_WORKERS=0), or in PYTEST_WORKERS processes
# (pytest-xdist), each test file, or each set of files that read one shared workload
# (tests/conftest.py marks their group), to one of them in the order collected (the
# compatibility suite's first: tests/compat/conftest.py), so no module fixture or shared
# workload (a Spark checkpoint, a release's workload) is made twice.
PYTEST_WORKERS ?= 0
pytest: $(STAMP) class-archive
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

# Spark's classes, parsed and verified once for every later test and demo JVM
# (epochstate.devtools.class_archive): about a minute once per Java and pyspark, then
# half the CPU of each Spark JVM's start. Nothing to do when the archive exists.
class-archive: $(STAMP)
	$(BIN)/python -m epochstate.devtools.class_archive

# The pinned dependencies: the image's (deploy/constraints.txt, what pip resolves for the
# Dockerfile's extras) and the development environment's (.ci/constraints-dev.txt), with
# Python 3.11 (the image's and CI's). Commit the files it writes.
# Not from the venv: a pin that no longer fits pyproject.toml stops the venv's own install.
constraints:
	$(PYTHON) .ci/constraints.py > deploy/constraints.txt.tmp && mv deploy/constraints.txt.tmp deploy/constraints.txt
	$(PYTHON) .ci/constraints.py --dev > .ci/constraints-dev.txt.tmp && mv .ci/constraints-dev.txt.tmp .ci/constraints-dev.txt

# deploy/ and the Dockerfile offline (make pytest runs these too): kustomize renders, strict
# API and CRD schemas, hadolint, the rendered daemon containers run as local processes.
deploy-check: $(STAMP)
	$(BIN)/python -m pytest tests/deploy $(PYTEST_ARGS)

# The ZooKeeper-facing tests again, every component and test client authenticated
# (docs/zookeeper.md): tests/e2e/test_zookeeper_acl.py covers auth in `make pytest`.
ZK_AUTH_TESTS := tests/e2e/test_aligned_selector.py tests/e2e/test_zookeeper.py tests/registry tests/group \
	tests/alignment/test_subjects.py tests/alignment/test_coordinator.py
zookeeper-auth: $(STAMP)
	mkdir -p build && (umask 077 && echo "epochstate:$$(openssl rand -hex 32)" > build/zookeeper-digest)
	EPOCHSTATE_ZOOKEEPER_AUTH_FILE=$(CURDIR)/build/zookeeper-digest $(BIN)/python -m pytest $(ZK_AUTH_TESTS) $(PYTEST_ARGS)

# The compatibility suite alone (make pytest runs it too): Spark 3.5, 4.0, 4.1, 4.2,
# each in a virtualenv under $EPOCHSTATE_COMPAT_HOME (~/.cache/epochstate/compat).
compat: $(STAMP)
	$(BIN)/python -m pytest tests/compat $(PYTEST_ARGS)

compat-venvs: $(STAMP)
	$(BIN)/python -m tests.compat.venvs

# Longer fuzzing than the bounded run in `make pytest` (see docs/development.md):
# every file parser under atheris for FUZZ_SECONDS each, the working corpus and any
# findings in var/fuzz; then the gRPC API under hypothesis for FUZZ_EXAMPLES examples.
FUZZ_SECONDS  ?= 60
FUZZ_EXAMPLES ?= 2000
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz.run --all --seconds $(FUZZ_SECONDS) --work var/fuzz
	$(MAKE) fuzz-grpc

fuzz-grpc: $(STAMP)
	FUZZ_GRPC_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest tests/fuzz/test_grpc.py -p no:cacheprovider -rP $(PYTEST_ARGS)

# Rewrite the seed corpus from real Spark queries (minutes).
fuzz-seeds: $(STAMP)
	$(BIN)/python -m tests.fuzz.seeds

proto: $(STAMP)
	$(BIN)/python proto/generate.py

bench: $(STAMP)
	$(BIN)/python -m bench.lookup $(BENCH_ARGS)

# Routed reads over a group of 1, 2, 3 daemons, 1..64 callers, against the echo floor (a few minutes).
bench-routing: $(STAMP)
	$(BIN)/python -m bench.routing $(BENCH_ARGS)

bench-ingest: $(STAMP)
	$(BIN)/python -m bench.ingest $(BENCH_ARGS)

# 10M keys against 100k: ingest per epoch, Get, disk (10-16 min on 2 cores; BENCH_ARGS="--keys-large 1000000")
bench-state-size: $(STAMP)
	$(BIN)/python -m bench.state_size $(BENCH_ARGS)

bench-object-store: $(STAMP)
	$(BIN)/python -m bench.object_store $(BENCH_ARGS)

bench-s3-clients: $(STAMP)
	$(BIN)/python -m bench.storage_clients $(BENCH_ARGS)

bench-alignment: $(STAMP)
	$(BIN)/python -m bench.alignment $(BENCH_ARGS)

# One whole epoch of the 100,000-key state into Arrow: the client against Spark's reader (about 2 min).
bench-arrow: $(STAMP)
	$(BIN)/python -m bench.arrow_scan $(BENCH_ARGS)

# 30 minutes of ingest and reads; are the daemon's resources bounded? (SOAK_ARGS=--minutes 5)
soak: $(STAMP)
	$(BIN)/python -m bench.soak $(SOAK_ARGS)

clean:
	rm -rf $(VENV) var build *.egg-info
