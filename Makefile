# msprobe developer entry points. Everything runs inside .venv (created on demand).
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp
DEMO_DIR := demo_output

.PHONY: venv demo test bench clean distclean

venv: $(STAMP)

# (Re)install only when the packaging metadata changes, so a set-up .venv makes `make test` quick.
# torch is pinned explicitly: the 2.13.0 CPU wheel is on local disk, a bare `torch` would pull a
# multi-GB CUDA build from the registry.
$(STAMP): setup.py pyproject.toml
	@test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install --upgrade pip
	$(VPY) -m pip install -e ".[test]"
	$(VPY) -m pip install torch==2.13.0
	@touch $(STAMP)

# compare never overwrites an existing report, so start from a clean demo_output each time.
demo: venv
	rm -rf $(DEMO_DIR)
	$(VPY) examples/make_example_dumps.py $(DEMO_DIR)/dumps
	$(VENV)/bin/msprobe compare \
		-tp $(DEMO_DIR)/dumps/target/step0/rank0/dump.json \
		-gp $(DEMO_DIR)/dumps/golden/step0/rank0/dump.json \
		-o $(DEMO_DIR)/report
	@report=$$(find $(DEMO_DIR)/report -type f -name '*.xlsx' -printf '%T@ %p\n' | sort -n | tail -n 1 | cut -d' ' -f2-); \
	if [ -z "$$report" ]; then \
		report=$$(find $(DEMO_DIR)/report -type f \( -name '*.csv' -o -name '*.xlsx' \) -printf '%T@ %p\n' | sort -n | tail -n 1 | cut -d' ' -f2-); \
	fi; \
	if [ -z "$$report" ]; then echo "No report found under $(DEMO_DIR)/report" >&2; exit 1; fi; \
	echo "Report: $$report"

test: venv
	$(VPY) -m pytest -q -ra tests

bench: venv
	$(VPY) benchmarks/run_all.py

# Build/run artefacts only; the .venv is kept (use `make distclean` to drop it as well).
clean:
	rm -rf $(DEMO_DIR) build dist *.egg-info .pytest_cache bench_work output
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
