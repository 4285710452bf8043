# Two fresh-machine commands: `make run` (main job on the embedded default) and `make test`.
# Both create and use the local virtual environment .venv by themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SHARED ?= ../shared/data
DEMO   := $(SHARED)/mimic-iv-demo-2.2
CHART  := $(SHARED)/chartevents-from-meds/chartevents.csv.gz
DATA   := data

.PHONY: run test venv bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# Until the pair pipeline exists: build the source database (the real MIMIC-IV demo when present,
# otherwise the embedded synthetic default) and run the source quality gate on it.
run: venv
	@mkdir -p $(DATA)
	@if [ -d "$(DEMO)" ] && [ -f "$(CHART)" ]; then \
	  [ -f $(DATA)/demo.duckdb ] || $(BIN)/ehrgym load $(DEMO) --db $(DATA)/demo.duckdb --table chartevents=$(CHART); \
	  $(BIN)/ehrgym validate-source --db $(DATA)/demo.duckdb; \
	else \
	  [ -f $(DATA)/synthetic.duckdb ] || $(BIN)/ehrgym synth --patients 1000 --seed 0 --db $(DATA)/synthetic.duckdb; \
	  $(BIN)/ehrgym validate-source --db $(DATA)/synthetic.duckdb; \
	fi

test: venv
	$(BIN)/python -m pytest -n 2 --dist loadfile

bench: venv
	$(BIN)/python benchmarks/bench_load.py

clean:
	rm -rf $(VENV) $(DATA) .pytest_cache
