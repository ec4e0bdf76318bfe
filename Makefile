# Two commands for a newcomer: `make demo` and `make test`. Both set themselves up from a clean clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
CHECKED := src tests benchmarks examples

.PHONY: setup demo test lint typecheck pytest bench mutation clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) examples/llm_burst.py

test: lint typecheck pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check $(CHECKED)
	$(VENV)/bin/ruff format --check $(CHECKED)

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	cd benchmarks && ../$(PY) bench.py

# Mutation testing of the decision core and the driver (slow; installs mutmut on first use).
mutation: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check 'mutmut>=3.2,<4'
	HYPOTHESIS_PROFILE=mutation $(VENV)/bin/mutmut run --max-children 2
	$(VENV)/bin/mutmut results

clean:
	rm -rf $(VENV) mutants .mypy_cache .pytest_cache .ruff_cache .hypothesis
