# Two commands on a fresh machine: `make run` and `make test`. Both create .venv once and
# reuse it until pyproject.toml or constraints.txt change.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# make test also installs the optional extras (torch, grain) so their readers are tested;
# make run does not.
EXTRAS_STAMP := $(VENV)/.installed-extras
SAMPLE := build/sample
OUTPUT := build/output
export TF_CPP_MIN_LOG_LEVEL ?= 3
export TF_ENABLE_ONEDNN_OPTS ?= 0

.PHONY: install install-extras browser run test lint format bench bench-loaders clean

install: $(STAMP)

install-extras: $(EXTRAS_STAMP)

$(STAMP): pyproject.toml setup.py constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	$(BIN)/pip check
	touch $(STAMP)

$(EXTRAS_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test,torch,jax]'
	$(BIN)/pip check
	touch $(EXTRAS_STAMP)

run: install
	rm -rf $(SAMPLE) $(OUTPUT)
	$(BIN)/segprep sample-data $(SAMPLE) --count 200
	$(BIN)/segprep prepare --image_dir $(SAMPLE)/images --mask_dir $(SAMPLE)/masks \
		--output_dir $(OUTPUT)
	$(BIN)/python examples/read_batch.py $(OUTPUT)
	@echo "segprep is installed in $(VENV): run $(BIN)/segprep --help, or 'source $(BIN)/activate' first"

test: install-extras lint browser
	$(BIN)/python -m pytest

# `segprep report`'s tests open the page in headless Chromium, Debian's package.
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		echo "chromium could not be installed: the report's browser tests are skipped outside CI"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install
	$(BIN)/python benchmarks/writer.py
	$(BIN)/python benchmarks/reader.py

bench-loaders: install-extras
	$(BIN)/python benchmarks/loaders.py

clean:
	rm -rf build $(VENV)
