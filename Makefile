# Each target builds .venv on first use, so a fresh clone needs only python3 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: certify test lint bench soak clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

certify: $(STAMP)
	$(BIN)/crash-harness certify

test: $(STAMP)
	$(BIN)/python -m pytest

# The whole false-alarm soak: 1,000 cases of every fault kind and size (tests/test_soak.py) and
# 1,001 crash-restart cycles of the certify campaign (tests/test_mutants.py); every CI run
# takes a seeded slice of both. PostgreSQL too when CRASH_HARNESS_PG_URL is set.
soak: $(STAMP)
	$(BIN)/python -m pytest --run-slow -k thousand tests/test_soak.py tests/test_mutants.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_cycle.py
	$(BIN)/python benchmarks/bench_boundary.py
	$(BIN)/python benchmarks/bench_sweep_explore.py
	$(BIN)/python benchmarks/bench_schedule_cost.py
	$(BIN)/python benchmarks/bench_jobs.py
	$(BIN)/python benchmarks/bench_html.py

clean:
	rm -rf $(VENV) reports/report.json reports/report.md
