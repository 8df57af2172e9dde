# Kernelsmith. Two commands matter on a fresh machine: `make run` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
KS      := $(BIN)/kernelsmith
STAMP   := $(VENV)/.installed
OPS     ?= activation.silu_and_mul layernorm.fused_add_rmsnorm layernorm.rmsnorm

.PHONY: install run extract optimize integrate test test-gpu bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[build,dev]'
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

test: $(STAMP)
	$(BIN)/python -m pytest -q

# On the GPU machine (through the device tool): the GPU-marked tests only.
test-gpu:
	$(PY) -m pytest -q -m gpu -p no:cacheprovider

bench: $(STAMP)
	$(KS) bench --ops $(OPS)

clean:
	rm -rf work .pytest_cache build *.egg-info
