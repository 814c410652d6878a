# One command to build the environment and run a demo release; one to run the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

# Prefect state stays inside the checkout (git-ignored); its temporary server may take 20-45 s here.
export PREFECT_HOME ?= $(CURDIR)/.prefect
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 120
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
# The private workspace (and its privacy registry) is the user's, not the checkout's:
# $DPSYNTH_WORKSPACE when set, else ~/.local/share/dpsynth/workspace ($XDG_DATA_HOME/dpsynth/workspace).

.PHONY: install demo test test-fast bench clean serve serve-stop

# Two stamps: `make demo` installs only what a release needs (`-e .`); `make test` adds the
# test extra (opendp, the solvers, Dask, pytest-xdist: most of the 1.3 GB).
$(VENV)/.created:
	$(PYTHON) -m venv $(VENV)
	touch $@

$(VENV)/.installed-demo: pyproject.toml $(VENV)/.created
	$(BIN)/python -m pip install --quiet --no-compile -e .
	touch $@

# The Prefect database template (once per Prefect version, in ~/.cache/dpsynth): a new
# PREFECT_HOME's temporary server then starts from a copy instead of running every migration.
# Not built for `make demo`, which runs on the local engine unless a server answers (the
# first Prefect release keeps its freshly migrated database as the template instead).
$(VENV)/.installed: pyproject.toml $(VENV)/.created
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python -m dpsynth.orchestration.prefect_db || echo "no Prefect database template: the first Prefect release migrates its database"
	touch $@ $(VENV)/.installed-demo

install: $(VENV)/.installed

demo: $(VENV)/.installed-demo
	@test -f .dpsynth/demo-seed || (mkdir -p .dpsynth && head -c 32 /dev/urandom | base64 > .dpsynth/demo-seed)
	@# with a Prefect server (`make serve`, or PREFECT_API_URL) the demo is a flow run on it, shown in
	@# its dashboard; without one, the same stages run in-process (--engine local), not paying a
	@# temporary server's first start (20-90 s here: it creates and migrates its database)
	if [ -z "$${PREFECT_API_URL:-}" ] && url=$$(deployments/serve.sh url); then export PREFECT_API_URL=$$url; fi; \
	engine=$${PREFECT_API_URL:+prefect}; \
	$(BIN)/dpsynth release --engine $${engine:-local} --data data/demo.csv --schema schemas/demo.yaml \
	  --epsilon 1.0 --seed-file .dpsynth/demo-seed --out releases --name demo-$$(date -u +%Y%m%dT%H%M%SZ)

# Two workers (pytest-xdist); the Prefect flow tests share one test server, so they run in one
# group on one worker (tests/conftest.py). TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2

test: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

test-fast: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not slow and not flow"

bench: install
	$(BIN)/python benchmarks/encode_throughput.py
	$(BIN)/python benchmarks/release_timing.py

serve: $(VENV)/.installed-demo
	deployments/serve.sh start

serve-stop:
	deployments/serve.sh stop

clean:
	rm -rf $(VENV) .prefect .dpsynth releases .pytest_cache
