# Two commands do all the set-up on a fresh machine:
#   make demo   bootstrap .venv, then run the main job on a built-in default
#   make test   bootstrap .venv, then run the whole test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.grpo-skill-installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml packaging/grpo-skill-tasks/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@# torch first, so that nothing later pulls a multi-GB CUDA build.
	@$(PY) -m pip install -q torch==2.13.0
	@# Both distributions, editable: grpo-skill (checker, reference_impl, skill installer, skill)
	@# and grpo-skill-tasks (the task harness and the task specs, with matplotlib for the report's chart).
	@$(PY) -m pip install -q -e ".[dev]" -e "packaging/grpo-skill-tasks[report]"
	@touch $(STAMP)

demo: $(STAMP)
	@$(VENV)/bin/grpo-check demo

test: $(STAMP)
	@$(PY) -m pytest -n 2 --dist loadgroup

lint: $(STAMP)
	@$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: $(STAMP)
	@for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache packaging/*/build packaging/*/*.egg-info
