# Two commands for a fresh machine: `make demo` and `make test`. Both depend on `make install`.
#
# torch: CPU machines of this class take torch==2.13.0 from local disk. On a CUDA machine, override:
#   make install TORCH_SPEC="torch==2.13.0" TORCH_INDEX="--index-url https://download.pytorch.org/whl/cu128"
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
export PREFECT_SERVER_ANALYTICS_ENABLED := false

.PHONY: install demo test lint bench clean

install: $(STAMP)

# Re-runs only when the packaging or the C++ helpers change; a no-op otherwise.
$(STAMP): pyproject.toml setup.py $(wildcard csrc/indices/*)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH_INDEX) "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[all,dev]"
	touch $(STAMP)

# The whole pipeline (tokenizer -> datasets -> blend -> training -> export -> sample) as Prefect flows.
demo: install
	PREFECT_SERVER_ANALYTICS_ENABLED=false $(PY) -m flows.demo --out demo_out

# setup.py builds the C++ index helpers as optional (installs without a compiler still work, on numpy):
# here a failed build must fail, not skip their tests.
test: install
	$(PY) -m ruff check bloomdata bloomtrain flows tests benchmarks
	@$(PY) -c "import bloomdata._index_helpers" || { echo "bloomdata._index_helpers is not built; see the compiler error with: $(PY) -m pip install -v --no-deps -e ."; exit 1; }
	$(PY) -m pytest -q -m "not gpu" $(PYTEST_ARGS)

lint: install
	$(PY) -m ruff check bloomdata bloomtrain flows tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info demo_out
