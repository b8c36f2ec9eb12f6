# `make demo`: set up and run the main job end to end on the embedded hub.
# `make test`: set up and run the whole test suite.
# Both create/update .venv and install hub-export with every backend under constraints.txt.

PYTHON ?= python3
# the run ends with its 30 slowest tests (the suite must stay within about 15 minutes on 2 cores)
# pytest workers: one per core of the 2-core CI machine (each test module runs whole on one worker: --dist loadfile;
# tests/conftest.py pins each worker to a core of its own, so that the runtimes' thread pools do not share cores)
WORKERS ?= 2
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint install consumers clean bench

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml constraints.txt
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[all,test]"
	touch $(STAMP)

install: $(STAMP)

# the runtimes' own tools the consumer tests run (tests/test_consumers.py): the optimum packages in environments of
# their own, transformers.js from npm, Debian's Chromium; cached per machine, so only the first run creates them
consumers: $(STAMP)
	$(PY) tests/consumers/envs.py

# ruff (lint + format) and mypy before the tests: CI enforces them
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy hub_export

test: lint consumers
	HF_HUB_DISABLE_XET=1 HF_HUB_DISABLE_TELEMETRY=1 $(PY) -m pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadfile --durations=30 $(PYTEST_ARGS)

demo: $(STAMP)
	HF_HUB_DISABLE_XET=1 HF_HUB_DISABLE_TELEMETRY=1 $(PY) -m hub_export.demo

bench: $(STAMP)
	$(PY) benchmarks/onnx_runner.py

clean:
	rm -rf $(VENV) demo-output
