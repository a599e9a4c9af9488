# Each target builds .venv on first use, so a fresh clone needs only python3 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: certify test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

certify: $(STAMP)
	$(BIN)/crash-harness certify

test: $(STAMP)
	$(BIN)/python -m pytest

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

clean:
	rm -rf $(VENV) reports/report.json reports/report.md
