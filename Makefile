# torchneuron: the two set-up commands are `make demo` and `make test` (see README.md).
# Every target installs what is missing and builds incrementally; all are idempotent.
SHELL := /bin/bash
BUILD ?= build
PYTHON := /usr/bin/python3
JOBS ?= $(shell nproc)

.PHONY: all deps configure build demo test conformance conformance-adaptive conformance-eager-replay bench bench-quick format format-check clean

all: build

deps:
	@scripts/install_deps.sh

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)
	@scripts/link_python_package.sh $(BUILD)/python

demo: build
	$(PYTHON) demo/train.py

test: build format-check
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# C++ sources formatted by clang-format-19 (.clang-format): `make format` rewrites them,
# `make format-check` (part of `make test`) lists any that differ and fails.
FORMATTED = git ls-files 'src/*.cpp' 'src/*.h' 'bindings/*.cpp' 'tests/*.cpp' 'tests/*.h' 'bench/*.cpp'

format: deps
	$(FORMATTED) | xargs clang-format-19 -i

format-check: deps
	@unformatted=$$($(FORMATTED) | xargs clang-format-19 --dry-run --Werror 2>&1 \
	  | grep -o '^[^ :]*\.\(cpp\|h\):' | tr -d ':' | sort -u | tr '\n' ' '); \
	if [ -n "$$unformatted" ]; then \
	  echo "[format] not as clang-format-19 formats them (run 'make format'): $$unformatted" >&2; \
	  exit 1; fi

conformance: build
	$(PYTHON) tests/conformance/run_conformance.py --output $(BUILD)/conformance/summary.json

# The referee under the adaptive eager tracer: each device sample three times (cold, hot,
# replayed); every float32 sample, the quick selection in the other dtypes. It fails on any
# unexpected mismatch or device error, and when fewer than 1,000 samples replayed.
conformance-adaptive: build
	$(PYTHON) tests/conformance/run_conformance.py --adaptive --min-replayed 1000 \
	  --output $(BUILD)/conformance/summary-adaptive.json

# The referee in eager mode with the eager call cache: each device sample three times (the third
# replays the call captured in the second); every float32 sample, the quick selection in the other
# dtypes. It fails on any unexpected mismatch or device error, and when fewer than 1,000 samples
# replayed.
conformance-eager-replay: build
	$(PYTHON) tests/conformance/run_conformance.py --eager-replay --min-replayed 1000 \
	  --output $(BUILD)/conformance/summary-eager-replay.json

# Every workload in every mode at 1 and 2 threads: $(BUILD)/bench/report.{md,json,png}.
bench: build
	$(PYTHON) bench/run_bench.py --build $(BUILD)

# A few workloads, for a check in about a minute.
bench-quick: build
	$(PYTHON) bench/run_bench.py --build $(BUILD) --quick

clean:
	rm -rf $(BUILD)
