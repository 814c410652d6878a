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

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

install: $(VENV)/.installed

demo: install
	@test -f .dpsynth/demo-seed || (mkdir -p .dpsynth && head -c 32 /dev/urandom | base64 > .dpsynth/demo-seed)
	@# a running `make serve` server saves the temporary server's start-up
	if [ -z "$${PREFECT_API_URL:-}" ] && url=$$(deployments/serve.sh url); then export PREFECT_API_URL=$$url; fi; \
	$(BIN)/dpsynth release --data data/demo.csv --schema schemas/demo.yaml \
	  --epsilon 1.0 --seed-file .dpsynth/demo-seed --out releases --name demo-$$(date -u +%Y%m%dT%H%M%SZ)

test: install
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow and not flow"

bench: install
	$(BIN)/python benchmarks/encode_throughput.py
	$(BIN)/python benchmarks/release_timing.py

serve: install
	deployments/serve.sh start

serve-stop:
	deployments/serve.sh stop

clean:
	rm -rf $(VENV) .prefect .dpsynth releases .pytest_cache
