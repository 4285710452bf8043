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
PATIENTS ?= 1000
SEED   ?= 0
PER_TEMPLATE ?= 2
VERSION ?= synthetic-$(PATIENTS)-seed$(SEED)

.PHONY: run demo test venv bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,airflow]'
	touch $(STAMP)

# The main job on the embedded default: a synthetic MIMIC-IV (no ../shared needed), its source gate, the
# template lint, and a release of verified Clean-Noise pairs in data/releases/<version>/.
run: venv
	@mkdir -p $(DATA)
	@[ -f $(DATA)/synthetic.duckdb ] || $(BIN)/ehrgym synth --patients $(PATIENTS) --seed $(SEED) --db $(DATA)/synthetic.duckdb
	$(BIN)/ehrgym validate-source --db $(DATA)/synthetic.duckdb --out $(DATA)/synthetic.source-gate.json
	$(BIN)/ehrgym templates check
	@if [ -d $(DATA)/releases/$(VERSION) ]; then echo "release already built: $(DATA)/releases/$(VERSION)"; else \
	  $(BIN)/ehrgym build --db $(DATA)/synthetic.duckdb --out $(DATA)/releases --version $(VERSION) \
	    --per-template $(PER_TEMPLATE) --seed $(SEED); fi

# The same on the real MIMIC-IV demo (needs ../shared/data).
demo: venv
	@mkdir -p $(DATA)
	@[ -f $(DATA)/demo.duckdb ] || $(BIN)/ehrgym load $(DEMO) --db $(DATA)/demo.duckdb --table chartevents=$(CHART)
	$(BIN)/ehrgym validate-source --db $(DATA)/demo.duckdb --out $(DATA)/demo.source-gate.json
	$(BIN)/ehrgym tasks --db $(DATA)/demo.duckdb --out $(DATA)/demo-tasks.jsonl --per-template 5 --seed $(SEED)

test: venv
	$(BIN)/python -m pytest -n 2 --dist loadfile

bench: venv
	$(BIN)/python benchmarks/bench_load.py
	$(BIN)/python benchmarks/bench_synth.py

clean:
	rm -rf $(VENV) $(DATA) .pytest_cache
