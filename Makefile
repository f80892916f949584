# biosig-lightning developer commands. Everything runs inside ./.venv, which `make install` creates.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# the CPU build; on a machine with a GPU set TORCH_SPEC="torch>=2.4" (or install torch first)
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# pytest-xdist workers; modules stay whole on one worker (their module fixtures run once)
TEST_WORKERS ?= 2
# make demo: BioFormer at the paper's APAVA protocol, cut to this many epochs (about 3 minutes of
# training on 2 cores), on APAVA's stand-in; then a band-power logistic regression on the same split
DEMO_EPOCHS ?= 3

.PHONY: install demo test lint docs bench clean help

help:
	@echo "make install   create $(VENV) and install biosig-lightning with its dev tools"
	@echo "make demo      train BioFormer on APAVA's synthetic stand-in, print test metrics and the results path"
	@echo "make test      run the whole test suite"
	@echo "make lint      ruff (rules and 110-character lines), and mypy on the whole biosig_lightning package"
	@echo "make docs      build the documentation site strictly into site/ (mkdocs build --strict)"
	@echo "make bench     loader and train-step throughput (benchmarks/)"

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -e ".[dev,docs]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/biosig fit --config experiments/bioformer_apava.yaml --config experiments/overlays/synthetic.yaml \
		--trainer.max_epochs=$(DEMO_EPOCHS)
	$(BIN)/python -m biosig_lightning.analysis.band_power_baseline runs/bioformer_apava

test: $(STAMP)
	$(BIN)/python -m pytest tests -n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check biosig_lightning tests benchmarks tools docs/tools
	$(BIN)/mypy

docs: $(STAMP)
	DISABLE_MKDOCS_2_WARNING=true NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf runs site .pytest_cache .ruff_cache .mypy_cache
