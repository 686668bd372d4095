# Two commands do all the set-up on a fresh machine (Python 3.10+, Java 17):
#   make demo   - embedded ZooKeeper, the daemon, a demo Spark job, epoch-pinned lookups
#   make test   - lint, types and the whole test suite (what CI runs)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo demo-chain test lint typecheck pytest proto bench bench-ingest bench-alignment clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/epochstate demo $(DEMO_ARGS)

demo-chain: $(STAMP)
	$(BIN)/epochstate demo-chain $(DEMO_ARGS)

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check daemon client spark_plugin proto/generate.py tests bench

typecheck: $(STAMP)
	$(BIN)/mypy epochstate tests bench

pytest: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

proto: $(STAMP)
	$(BIN)/python proto/generate.py

bench: $(STAMP)
	$(BIN)/python bench/lookup.py $(BENCH_ARGS)

bench-ingest: $(STAMP)
	$(BIN)/python bench/ingest.py $(BENCH_ARGS)

bench-alignment: $(STAMP)
	$(BIN)/python bench/alignment.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var build *.egg-info
