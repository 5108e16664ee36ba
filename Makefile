# The two commands of the README:
#   make demo   set up, then run the main CPU experiment (see README)
#   make test   set up, then run the whole test suite (CI runs exactly this via .ci/run)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM := false
export PYTHONHASHSEED ?= 0

.PHONY: setup test test-fast lint clean-venv

setup: $(STAMP)

# torch is installed first and alone so that pip takes the CPU wheel pinned in requirements.txt
# (a looser request from another package would otherwise pull a multi-GB CUDA build).
$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -r requirements.txt
	touch $(STAMP)

test: setup
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

lint: setup
	$(PY) -m ruff check .

clean-venv:
	rm -rf $(VENV)
