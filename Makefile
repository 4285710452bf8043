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
PER_TEMPLATE ?= 120
WORKERS ?= 2
VERSION ?= synthetic-$(PATIENTS)-seed$(SEED)

.PHONY: run demo test test-fast lint venv bench proof clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,airflow]'
	touch $(STAMP)

# The main job on the embedded default, run by Airflow for real: `airflow dags test ehrgym_rebuild` (SQLite
# metadata DB in .airflow/, migrated when the venv changes) generates the synthetic MIMIC-IV, gates it, builds the
# verified Clean-Noise pairs with mapped tasks per intent and publishes data/releases/<version>/.
AIRFLOW_DIR := $(CURDIR)/.airflow
AIRFLOW_ENV := AIRFLOW_HOME=$(AIRFLOW_DIR) AIRFLOW__CORE__LOAD_EXAMPLES=False AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/dags \
               GX_ANALYTICS_ENABLED=false
RUN_CONF := {"patients": $(PATIENTS), "source_seed": $(SEED), "seed": $(SEED), "per_template": $(PER_TEMPLATE), \
             "pair_workers": $(WORKERS), "version": "$(VERSION)", "data_dir": "$(CURDIR)/$(DATA)"}

$(AIRFLOW_DIR)/airflow.db: $(STAMP)
	@mkdir -p $(AIRFLOW_DIR)
	$(AIRFLOW_ENV) $(BIN)/airflow db migrate > $(AIRFLOW_DIR)/migrate.log 2>&1 || (tail -20 $(AIRFLOW_DIR)/migrate.log; exit 1)
	@touch $@

run: venv $(AIRFLOW_DIR)/airflow.db
	@mkdir -p $(DATA)
	$(BIN)/ehrgym templates check
	@if [ -d $(DATA)/releases/$(VERSION) ]; then echo "release already built: $(CURDIR)/$(DATA)/releases/$(VERSION)"; else \
	  echo "airflow dags test ehrgym_rebuild (log: $(AIRFLOW_DIR)/make-run.log); tasks as they start and end:"; \
	  { $(AIRFLOW_ENV) $(BIN)/airflow dags test ehrgym_rebuild -c '$(RUN_CONF)' 2>&1; echo $$? > $(AIRFLOW_DIR)/make-run.rc; } \
	    | tee $(AIRFLOW_DIR)/make-run.log | grep --line-buffered -oE 'DAG TEST\] (starting|end task) task_id=[a-z_]+( map_index=[0-9]+)?' \
	    | sed -u 's/^DAG TEST\] /  /'; \
	  [ "$$(cat $(AIRFLOW_DIR)/make-run.rc)" = 0 ] && ! grep -q "DagRun failed" $(AIRFLOW_DIR)/make-run.log \
	    || { grep -E "ERROR|Error|error|failed" $(AIRFLOW_DIR)/make-run.log | tail -20; exit 1; }; \
	  echo "release: $(CURDIR)/$(DATA)/releases/$(VERSION)"; fi

# The same on the real MIMIC-IV demo (needs ../shared/data).
demo: venv
	@mkdir -p $(DATA)
	@[ -f $(DATA)/demo.duckdb ] || $(BIN)/ehrgym load $(DEMO) --db $(DATA)/demo.duckdb --table chartevents=$(CHART)
	$(BIN)/ehrgym validate-source --db $(DATA)/demo.duckdb --out $(DATA)/demo.source-gate.json
	$(BIN)/ehrgym tasks --db $(DATA)/demo.duckdb --out $(DATA)/demo-tasks.jsonl --per-template 5 --seed $(SEED)

# Lint, format and type checks first (seconds; the configuration is in pyproject.toml), then the whole suite.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -n 2 --dist loadfile --durations=15

# The self-contained tier for development: no ../shared data, nothing marked slow (Airflow runs); 4 min 40 s here.
test-fast: venv
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not realdata and not slow"

# Loader and generator; then noise, environment and evaluation on the database and release `make run` built.
bench: venv
	$(BIN)/python benchmarks/bench_load.py
	$(BIN)/python benchmarks/bench_synth.py
	@[ -d $(DATA)/releases/$(VERSION) ] || { echo "run 'make run' first: the env/eval benchmarks serve its release"; exit 1; }
	$(BIN)/python benchmarks/bench_noise.py $(DATA)/synthetic-$(PATIENTS)-seed$(SEED).duckdb --per-template 2 --seconds 120
	$(BIN)/python benchmarks/bench_build.py $(DATA)/synthetic-$(PATIENTS)-seed$(SEED).duckdb --per-template 10 --workers 1,2
	$(BIN)/python benchmarks/bench_env.py $(DATA)/releases/$(VERSION) $(DATA)/synthetic-$(PATIENTS)-seed$(SEED).duckdb
	$(BIN)/python benchmarks/bench_eval.py $(DATA)/releases/$(VERSION) $(DATA)/synthetic-$(PATIENTS)-seed$(SEED).duckdb

# The full-scale proof (issue 14, a benchmark, not part of make test): a 100,000-patient synthetic source (about
# 1 billion rows, generated in chunks) and one build on it, each process's DuckDB held to PROOF_MEMORY;
# benchmarks/results/scale-100000.json.
PROOF_PATIENTS ?= 100000
PROOF_PER_TEMPLATE ?= 1
PROOF_MEMORY ?= 3GB
proof: venv
	EHRGYM_DUCKDB_MEMORY=$(PROOF_MEMORY) $(BIN)/python benchmarks/bench_scale.py --patients $(PROOF_PATIENTS) \
		--per-template $(PROOF_PER_TEMPLATE) --workers $(WORKERS)

clean:
	rm -rf $(VENV) $(DATA) .pytest_cache
