# Each target builds .venv on first use, so a fresh clone needs only python3 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: certify test lint bench bench-quick soak fuzz clean

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

# The bad-input fuzzers at full size: mutated scenario files and command lines, each must
# load or be refused in one line, never a traceback (CI runs 150 of each); and 100 mutated
# files that load, each run for real, within a bound (CI runs 3).
fuzz: $(STAMP)
	CRASH_HARNESS_FUZZ_EXAMPLES=$${CRASH_HARNESS_FUZZ_EXAMPLES:-3000} \
	CRASH_HARNESS_RUN_FUZZ_EXAMPLES=$${CRASH_HARNESS_RUN_FUZZ_EXAMPLES:-100} \
	  $(BIN)/python -m pytest -q -s tests/test_scenario_fuzz.py tests/test_cli_fuzz.py \
	  tests/test_run_fuzz.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Every benchmarks/bench_*.py, printing medians and ratios measured in one run; bench-quick is
# the same code on a few rounds (CI runs it through tests/test_benchmarks.py so it cannot rot).
bench: $(STAMP)
	@set -e; for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b; done

bench-quick: $(STAMP)
	@set -e; for b in benchmarks/bench_*.py; do echo "== $$b"; \
	  CRASH_HARNESS_BENCH_QUICK=1 $(BIN)/python $$b; done

clean:
	rm -rf $(VENV) reports/report.json reports/report.md
