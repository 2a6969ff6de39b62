# Two commands for a fresh machine: `make demo` and `make test`. Both depend on `make install`.
#
# torch: `make install` takes the CPU build on a machine without an NVIDIA driver (no nvidia-smi on PATH, no
# /proc/driver/nvidia), from PyTorch's CPU index (PyPI's Linux torch is the CUDA build: several GB of CUDA libraries
# a CPU cannot use), and PyPI's CUDA build where a driver is; it prints one line saying which. Override both, e.g.
#   make install TORCH_SPEC="torch==2.13.0" TORCH_INDEX="--index-url https://download.pytorch.org/whl/cu128"
# TORCH_SPEC= (empty) keeps the torch the machine already has (the venv then sees the system site-packages).
# Offline (docs/install.md): `make wheelhouse WHEELHOUSE=dir` where the registry is reachable, copy dir over,
# then `make install WHEELHOUSE=dir` (pip --no-index --find-links dir).
comma := ,
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
NVIDIA_PROC ?= /proc/driver/nvidia
NVIDIA_DRIVER := $(shell { command -v nvidia-smi || [ -e "$(NVIDIA_PROC)" ]; } >/dev/null 2>&1 && echo yes)
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
TORCH_SPEC ?= torch==$(TORCH_VERSION)$(if $(NVIDIA_DRIVER),,+cpu)
# yes when PyTorch's index resolves (checked only when TORCH_INDEX is used); where it does not (registries-only
# networks), pip looks for the CPU build in its own indexes and find-links instead of retrying the index per package
TORCH_CPU_INDEX_UP ?= $(shell $(PYTHON) -c "import socket; socket.getaddrinfo('download.pytorch.org', 443)" \
	>/dev/null 2>&1 && echo yes)
TORCH_INDEX ?= $(if $(NVIDIA_DRIVER),,$(if $(TORCH_CPU_INDEX_UP),--extra-index-url $(TORCH_CPU_INDEX)))
TORCH_WHY := $(if $(NVIDIA_DRIVER),an NVIDIA driver is here: the CUDA build,no NVIDIA driver here (no nvidia-smi$(comma) no $(NVIDIA_PROC)): the CPU build)
TORCH_LINE = $(if $(strip $(TORCH_SPEC)),$(if $(filter-out file,$(origin TORCH_SPEC) $(origin TORCH_INDEX)),as TORCH_SPEC/TORCH_INDEX say,$(TORCH_WHY)): $(TORCH_SPEC) $(if $(WHEELHOUSE),from $(WHEELHOUSE),$(or $(strip $(TORCH_INDEX)),$(if $(NVIDIA_DRIVER),from PyPI,from pip's indexes and find-links (PyTorch's CPU index does not resolve here)))); another: make install TORCH_SPEC=... TORCH_INDEX=... (TORCH_SPEC= keeps the machine's torch),TORCH_SPEC is empty: the machine's own torch)
EXTRAS ?= all,dev
WHEELHOUSE ?=
WHEEL_PYTHON ?=
WHEEL_PLATFORM ?=
STAMP := $(VENV)/.installed
# 1: the installed packages' bytecode is compiled at install (on every core); 0 leaves it to their first import
BYTECODE ?= 1
PYTEST_ARGS ?=
# pytest-xdist workers for make test (tests/conftest.py groups what must share one worker); 0 runs in one process
TEST_WORKERS ?= 2
DEMO_OUT ?= demo_out
DEMO_ARGS ?=
UI_ARGS ?=
# The real-engine tests run Debian's Slurm (tests/harness/slurm_cluster.py) and headless Chromium (the Prefect UI test).
ENGINE_PACKAGES := slurm-wlm munge chromium
ENGINE_BINARIES := munged mungekey slurmctld slurmd sbatch scontrol chromium
# (evaluated only when `engines` runs)
ENGINES_MISSING = $(strip $(foreach b,$(ENGINE_BINARIES),$(if $(shell command -v $(b) || ls /usr/sbin/$(b) 2>/dev/null),,$(b))))
CAN_APT = $(shell [ "$$(id -u)" = 0 ] && command -v apt-get)
GPU_REPORT ?= gpu_report
# Prefect's telemetry (a call home that offline clusters cannot make; its first-run notice is 4 console lines):
# off on the server and in the client.
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1

# With a wheelhouse every pip call is offline; TORCH_INDEX only applies online.
PIP_FROM := $(if $(WHEELHOUSE),--no-index --find-links $(abspath $(WHEELHOUSE)),)
TORCH_FROM = $(if $(WHEELHOUSE),$(PIP_FROM),$(TORCH_INDEX))
VENV_FLAGS := $(if $(strip $(TORCH_SPEC)),,--system-site-packages)

.PHONY: install demo ui test test-fast engines lint bench clean wheelhouse gpu-check gpu-speed reference

install: $(STAMP)

# Re-runs only when the packaging or the C++ helpers change; a no-op otherwise.
# pip compiles the bytecode of what it installs one file at a time (23,000 files: ~140 s of the install here);
# compileall does it on every core once everything is in (88 s on 2): a fresh install 303 -> 261 s (2-vCPU EPYC).
# Files that are not Python 3.11 (torch ships one in 3.12 syntax) fail there as they do under pip: skipped.
$(STAMP): pyproject.toml setup.py $(wildcard csrc/indices/*) $(wildcard csrc/bpe/*)
	@echo "make install: torch: $(TORCH_LINE)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(if $(strip $(TORCH_SPEC)),$(PY) -m pip install -q --no-compile $(TORCH_FROM) "$(TORCH_SPEC)")
	$(PY) -m pip install -q --no-compile $(PIP_FROM) -e ".$(if $(strip $(EXTRAS)),[$(EXTRAS)])"
	$(if $(filter 1,$(BYTECODE)),$(PY) -m compileall -qq -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("platlib"))')" || true)
	touch $(STAMP)

# Every wheel the project, all its extras, its build requirements and torch need, for
# `make install WHEELHOUSE=dir` on a machine without network. WHEEL_PYTHON=3.11 WHEEL_PLATFORM=manylinux_2_28_x86_64
# name another machine's; TORCH_SPEC= leaves torch out, TORCH_INDEX="--index-url URL" names where it comes from.
wheelhouse:
	@test -n "$(WHEELHOUSE)" || { echo "make wheelhouse: set WHEELHOUSE=dir (where the wheels go)"; exit 2; }
	$(PYTHON) wheelhouse.py --out "$(WHEELHOUSE)" --torch-spec "$(TORCH_SPEC)" \
		--torch-index "$(TORCH_INDEX)" $(if $(WHEEL_PYTHON),--python-version $(WHEEL_PYTHON)) \
		$(foreach p,$(WHEEL_PLATFORM),--platform $(p))

# The whole pipeline (tokenizer -> datasets -> blend -> training -> export -> sample) as Prefect flows.
# Ctrl-C: the demo saves its training and says so in one line (exit 130); `|| [ $$? -eq 130 ]` keeps make from
# adding its own "Error 130" line after it.
# DEMO_ARGS: more flags (python -m flows.demo --help), e.g. DEMO_ARGS="--train-iters 50 --verbose".
demo: install
	@$(PY) -m flows.demo --out $(DEMO_OUT) $(DEMO_ARGS) || [ $$? -eq 130 ]

# The Prefect UI on the runs `make demo` recorded (its database is in $(DEMO_OUT)/prefect/), until Ctrl-C.
ui: install
	@$(PY) -m flows.ui --out $(DEMO_OUT) $(UI_ARGS) || [ $$? -eq 130 ]

# What the real-engine tests need, installed with apt when missing (CI runs as root: .ci/run reaches this through
# `make test`); a no-op once installed. Without root or apt, one line says what to install, before any test runs.
# Without their recommends: 39 packages instead of 311 (Debian 12; avahi, CUPS helpers, Perl HTTP modules, and the
# libraries of Slurm plugins the tests' slurm.conf does not load: HDF5 profiling, IPMI energy, JWT auth, RRD).
ENGINES_CHECK = $(if $(ENGINES_MISSING),$(if $(CAN_APT),,$(error make test: the real-engine tests need $(ENGINES_MISSING): \
	install them with `sudo apt-get install $(ENGINE_PACKAGES)` (Debian's packages), then run make test again)))
engines:
	$(ENGINES_CHECK)
	@$(if $(ENGINES_MISSING),echo "make engines: installing $(ENGINE_PACKAGES) with apt-get (missing: $(ENGINES_MISSING))" \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		$(ENGINE_PACKAGES) >/dev/null,true)

# setup.py builds the C++ index helpers and BPE learner as optional (installs without a compiler still work, on numpy):
# here a failed build must fail, not skip their tests.
# apt (the engines: network and dpkg) runs beside pip and mypy (the venv, then lint), not before them: two jobs,
# or the job slots of a `make -jN test` (a -j2 of its own would make make warn and drop its jobserver).
BUILT_CHECK = @$(PY) -c "import bloomdata._index_helpers, bloomdata._bpe_learner, bloomdata._bpe_encoder" || { echo "bloomdata._index_helpers, _bpe_learner or _bpe_encoder is not built; see the compiler error with: $(PY) -m pip install -v --no-deps -e ."; exit 1; }
PYTEST_RUN = $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder
test:
	$(ENGINES_CHECK)
	@$(MAKE) --no-print-directory $(if $(filter -j%,$(MAKEFLAGS)),,-j2) engines lint
	$(BUILT_CHECK)
	$(PYTEST_RUN) -m "not gpu" $(PYTEST_ARGS)

# The loop to run while developing: every test but the integration tier (tests/tiers.py: subprocesses and CLIs,
# gloo ranks, torchrun, Slurm, the browser, the Prefect server, root's tmpfs, the demo) and the gpu one. No apt,
# no root, no lint (`make lint`). 1,213 tests; 2026-12-02 on the 2-vCPU EPYC shared by 8 sessions (load 15-27):
# 35.9 min wall, 481 CPU-s (~4 min on 2 idle cores), --durations sum 3,591 s (benchmarks/RESULTS.md).
test-fast: install
	$(BUILT_CHECK)
	$(PYTEST_RUN) -m "not integration and not gpu" $(PYTEST_ARGS)

lint: install
	$(PY) -m ruff check bloomdata bloomtrain flows tests benchmarks wheelhouse.py docs/reference/generate.py docs/examples
	$(PY) -m mypy

# On a CUDA machine: build the fused kernels, run `pytest -m gpu` and the GPU rows of the benchmarks, measure
# TFLOP/s and MFU of bloom-560m and bloom-1b7 training steps; writes $(GPU_REPORT)/gpu_report.md and .json.
# Exit 0 only when every check passes; 2 (one line) on a machine without CUDA.
gpu-check: install
	$(PY) benchmarks/gpu_check.py --out $(GPU_REPORT)

# docs/reference/: one page per command, per config model, blend.yaml and the flows' parameters, from the code
# (tests/test_reference_docs.py fails when they are stale).
reference: install
	$(PY) docs/reference/generate.py

# The speed run, under 8 minutes (a 15-minute device lease runs it twice): bloom-560m profiled beside the anchor with
# TORCH_LOGS=recompiles,graph_breaks, the head against its three GEMMs, the flash tiles, micro-batch 8 (gpu_check.py
# --speed); the same report files, each kernel group's time beside the anchor's.
gpu-speed: install
	$(PY) benchmarks/gpu_check.py --speed --out $(GPU_REPORT)

clean:
	rm -rf $(VENV) build *.egg-info $(DEMO_OUT)
