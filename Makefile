# Each target builds .venv on first use, so a fresh clone needs only python3 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: certify test test-under-load lint bench bench-quick soak fuzz clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,langgraph,dbos,pydantic-ai]'
	touch $(STAMP)

certify: $(STAMP)
	$(BIN)/crash-harness certify

# Two pytest-xdist workers: most of a test's time is its workers' and providers' processes
# waiting on each other, so two streams use a 2-core runner fully (about 10 min instead of
# 16). Each test holds on a busy machine by itself (test-under-load checks the verdicts).
# worksteal: a worker that runs out of tests takes the other's queued ones, so the run does
# not end with one core idle behind the other's last long campaigns.
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist worksteal

# A bounded slice of the suite with two CPU hogs per core beside it (.ci/under-load starts
# and always stops them): certify of the reference, a daemon's lifecycle, the liveness
# checker, a few mutants and the fixed RQ example must give the same verdicts on a busy
# runner as on an idle one. CI runs it after `make test`.
LOAD_SLICE := \
  'tests/test_certify.py::test_reference_certifies_clean_at_every_boundary[sqlite]' \
  tests/test_lifecycle.py::test_a_correct_daemon_settles_is_stopped_by_its_signal_and_passes \
  tests/test_invariants_liveness.py \
  'tests/test_mutants.py::test_each_mutant_is_caught_by_its_intended_invariant[sqlite-ack_before_send]' \
  'tests/test_mutants.py::test_each_mutant_is_caught_by_its_intended_invariant[sqlite-no_watchdog]' \
  'tests/test_mutants.py::test_each_mutant_is_caught_by_its_intended_invariant[sqlite-no_lease]' \
  'tests/test_example_rq.py::test_fixed_worker_holds_under_both_crash_scopes[process]'

test-under-load: $(STAMP)
	.ci/under-load -q $(LOAD_SLICE)

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

# Every benchmarks/bench_*.py, printing medians and ratios measured in one run, then one table
# of every figure that has a goal (benchmarks/summarize.py); bench-quick is the same code on a
# few rounds (CI runs it through tests/test_benchmarks.py so it cannot rot).
bench: $(STAMP)
	@set -e; rec=$$(mktemp); trap 'rm -f $$rec' EXIT; \
	for b in benchmarks/bench_*.py; do echo "== $$b"; \
	  CRASH_HARNESS_BENCH_RECORD=$$rec $(BIN)/python $$b; done; \
	$(BIN)/python benchmarks/summarize.py $$rec

bench-quick: $(STAMP)
	@set -e; rec=$$(mktemp); trap 'rm -f $$rec' EXIT; \
	for b in benchmarks/bench_*.py; do echo "== $$b"; \
	  CRASH_HARNESS_BENCH_QUICK=1 CRASH_HARNESS_BENCH_RECORD=$$rec $(BIN)/python $$b; done; \
	$(BIN)/python benchmarks/summarize.py $$rec

clean:
	rm -rf $(VENV) reports/report.json reports/report.md
