# msprobe developer entry points. Everything runs inside .venv (created on demand).
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp
DEMO_DIR := demo_output

.PHONY: venv demo test test-main bench clean distclean

venv: $(STAMP)

# (Re)install only when the packaging metadata changes, so a set-up .venv makes `make test` quick.
# torch is pinned explicitly: the 2.13.0 CPU wheel is on local disk, a bare `torch` would pull a
# multi-GB CUDA build from the registry. torchvision 0.28.0 (the release paired with torch 2.13.0; tests only,
# tests/tvmodels.py) is installed with --no-deps (nothing can replace the CPU torch) into its own folder
# $(VENV)/torchvision-site, not site-packages: its wheel's _C extension is built for CUDA torch and does not
# load, so a plain `import torchvision` fails, and transformers imports torchvision whenever it is installed
# (every transformers model then fails to import). tests/tvmodels.py puts that folder on sys.path and imports
# the models without _C.
$(STAMP): setup.py pyproject.toml
	@test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install --upgrade pip
	$(VPY) -m pip install -e ".[test]"
	$(VPY) -m pip install torch==2.13.0
	$(VPY) -m pip uninstall -y -q torchvision 2>/dev/null || true
	$(VPY) -m pip install -q --no-deps --upgrade --target $(VENV)/torchvision-site torchvision==0.28.0
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

test: venv npu-venv ms-venv
	$(VPY) -m pytest -q -ra --durations=15 tests

# The same suite with .venv only: .venv-npu and .venv-ms (4 GB together) are not built, and the tests that
# need them are skipped with the reason (an already built one is still used).
test-main: venv
	$(VPY) -m pytest -q -ra --durations=15 tests

bench: venv
	$(VPY) benchmarks/run_all.py

# Build/run artefacts only; the .venv is kept (use `make distclean` to drop it as well).
clean:
	rm -rf $(DEMO_DIR) build dist *.egg-info .pytest_cache bench_work output
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)

# --- torch_npu code path on CPU (see ../shared/spec/frameworks.md §5-6) -------------------------------------------
# .venv-npu: torch 2.13.0+cpu + torch-npu 2.13.0 + msprobe (editable) + pytest, and a stub CANN runtime built by
# ../shared/tools/cann_stub/make_cann_stub.py (gcc + binutils) into .venv-npu/cann_stub, so that torch_npu imports
# on a machine without Ascend. tests/npu runs only there (its conftest preloads the stub); tests/test_npu_path.py of
# the main suite runs it as a subprocess. Building it never fails the build: on any error it warns and leaves no
# stamp, and the main suite's NPU test then skips with the reason.
NPU_VENV := .venv-npu
NPU_VPY := $(NPU_VENV)/bin/python
NPU_STAMP := $(NPU_VENV)/.stamp
CANN_STUB_TOOL := ../shared/tools/cann_stub/make_cann_stub.py

.PHONY: npu-venv test-npu

npu-venv: $(NPU_STAMP)

$(NPU_STAMP): setup.py pyproject.toml $(wildcard $(CANN_STUB_TOOL))
	@rm -f $(NPU_STAMP); \
	if { test -x $(NPU_VPY) || $(PY) -m venv $(NPU_VENV); } \
	  && $(NPU_VPY) -m pip install -q torch==2.13.0 torch-npu==2.13.0 pytest \
	  && $(NPU_VPY) -m pip install -q -e . \
	  && test -f $(CANN_STUB_TOOL) \
	  && $(PY) $(CANN_STUB_TOOL) $(NPU_VPY) $(NPU_VENV)/cann_stub; then \
		touch $(NPU_STAMP); \
	else \
		echo "WARNING: could not build $(NPU_VENV) (torch-npu install or CANN stub from $(CANN_STUB_TOOL) failed);" \
		     "the torch_npu tests will be skipped." >&2; \
	fi

test-npu: npu-venv
	@test -f $(NPU_STAMP) || { echo "$(NPU_VENV) is not built (see the warning above)" >&2; exit 1; }
	$(NPU_VPY) -m pytest -q -ra tests/npu

# --- MindSpore PyNative dump (see ../shared/spec/frameworks.md section 1-3 and docs/dump_mindspore.md) -----------------
# .venv-ms: mindspore 2.10.0 (CPU wheel, 800 MB; needs numpy<2) + msprobe (editable) + pytest. A second venv, not the
# main one: MindSpore forces numpy<2 on everything in its venv, and its 2.8 GB should not be needed to work on compare.
# tests/mindspore runs only there; tests/test_mindspore_*.py of the main suite runs it as a subprocess. Building it
# never fails the build: on any error it warns and leaves no stamp, and the main suite's MindSpore test skips with the
# reason. MS_WHEEL_DIR (unset by default) may name a folder holding a downloaded mindspore wheel (pip then takes it from there).
MS_VENV := .venv-ms
MS_VPY := $(MS_VENV)/bin/python
MS_STAMP := $(MS_VENV)/.stamp
MS_WHEEL_DIR ?=

.PHONY: ms-venv test-ms

ms-venv: $(MS_STAMP)

$(MS_STAMP): setup.py pyproject.toml
	@rm -f $(MS_STAMP); \
	links=$$(test -n "$(MS_WHEEL_DIR)" && test -d "$(MS_WHEEL_DIR)" && echo "--find-links $(MS_WHEEL_DIR)"); \
	if { test -x $(MS_VPY) || $(PY) -m venv $(MS_VENV); } \
	  && $(MS_VPY) -m pip install -q $$links mindspore==2.10.0 "numpy<2" pytest openpyxl \
	  && $(MS_VPY) -m pip install -q -e . \
	  && $(MS_VPY) -c "import mindspore"; then \
		touch $(MS_STAMP); \
	else \
		echo "WARNING: could not build $(MS_VENV) (mindspore 2.10.0 install failed); the MindSpore tests will be skipped." >&2; \
	fi

test-ms: ms-venv
	@test -f $(MS_STAMP) || { echo "$(MS_VENV) is not built (see the warning above)" >&2; exit 1; }
	$(MS_VPY) -m pytest -q -ra tests/mindspore
