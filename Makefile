# Two commands on a fresh machine:
#   make demo   runs the main demonstration
#   make test   runs every test (CI runs exactly this through .ci/run)
# Each installs what it needs first (project venv with libtorch, pinned cbindgen, Mono) and is
# quick once installed. `make bench` runs the benchmarks.

SHELL := /bin/bash
# With pipefail, `cmd | grep -q` fails at random: grep quits at its first match, and a writer
# with more to print dies of SIGPIPE. Recipes capture the output first, then grep it.
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

ROOT := $(abspath .)
VENV := $(ROOT)/.venv
STAMPS := $(ROOT)/.stamps
CBINDGEN_VERSION := 0.29.4
export PATH := $(VENV)/bin:$(HOME)/.cargo/bin:$(PATH)
export VIRTUAL_ENV := $(VENV)
export LIBTORCH_USE_PYTORCH := 1

LIB_DIR := $(ROOT)/target/debug
# The library the suites and the bindings load (target/debug/libtensorref.so) is built with the
# demonstration model, an add-on (Cargo feature `models`; the default build leaves it out). Every
# cargo command of the suites builds with these same features, so that none replaces that library
# with a build without the model.
TEST_FEATURES := --features models
# The release's version (Cargo's, shared by every package) and the C ABI's.
TR_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
# A long step in a log rather than a terminal prints a line every 20 s (tools/heartbeat.sh).
HEARTBEAT := bash tools/heartbeat.sh
TR_ABI := $(shell sed -n 's/^\#define TR_ABI_VERSION \([0-9]*\)/\1/p' include/tensorref.h)
CFLAGS_STRICT := -std=c11 -Wall -Wextra -Wpedantic -Werror -I$(ROOT)/include
LINK := -L$(LIB_DIR) -ltensorref -Wl,-rpath,$(LIB_DIR) -lpthread

.PHONY: demo test setup build gen header-check package test-package test-structure test-rust test-core test-c test-examples-rust bench bench-overhead soak clean test-cuda gpu-bundle test-gpu-driver test-bench-peers test-bench-residency

# ---------------------------------------------------------------- install
setup: $(STAMPS)/venv $(STAMPS)/cbindgen-$(CBINDGEN_VERSION)

$(STAMPS)/venv: requirements.txt
	@echo "installing the project venv (.venv): PyTorch 2.11 with its CUDA libraries (about 4 GiB to download the first time) and the test dependencies"
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(HEARTBEAT) "installing the venv" $(VENV)/bin/pip install --disable-pip-version-check -r requirements.txt
	mkdir -p $(STAMPS) && touch $@

$(STAMPS)/cbindgen-$(CBINDGEN_VERSION):
	[ "$$(cbindgen --version 2>/dev/null)" = 'cbindgen $(CBINDGEN_VERSION)' ] \
	  || cargo install cbindgen --version $(CBINDGEN_VERSION) --locked
	mkdir -p $(STAMPS) && touch $@

# ---------------------------------------------------------------- build
# One build (Cargo's dev profile, with the model) serves `make demo` and every suite, so that
# `make test` after `make demo` compiles only the tests. Cargo names each crate as it compiles
# it, with a progress bar on a terminal.
FIRST_BUILD_NOTE := the first build compiles about 150 crates and the C++ shims against libtorch's headers: about 5 minutes on 2 cores; later builds take seconds
build: setup
	@test -f $(LIB_DIR)/libtensorref.so || echo "building libtensorref ($(FIRST_BUILD_NOTE))"
	$(HEARTBEAT) "building libtensorref" cargo build $(TEST_FEATURES)

# Everything written from the op table and the C ABI, in one pass (tools/gen.py): after changing
# src/ops/ops.def or anything under src/ffi, the Rust op code, the headers, the ABI manifest and
# every binding's declarations. header-check (part of `make test`) fails when any is stale.
gen: setup
	python3 tools/gen.py

header-check: setup
	python3 tools/gen.py --check

# ---------------------------------------------------------------- demo
# all-MiniLM-L6-v2 under a device budget of a quarter of its weights (mk/model.mk installs it).
demo: $(STAMPS)/venv $(STAMPS)/model
	@test -f $(LIB_DIR)/libtensorref.so || echo "make demo: building libtensorref and the demo ($(FIRST_BUILD_NOTE))"
	$(HEARTBEAT) "building and running the demo" cargo run $(TEST_FEATURES) --example minilm_demo

# ---------------------------------------------------------------- tests
# Each language adds its suite in mk/<language>.mk: `TEST_SUITES += test-<language>`.
TEST_SUITES := test-structure test-package test-rust test-core test-c test-examples-rust test-gpu-driver test-bench-peers test-bench-residency
BENCH_SUITES :=
include $(sort $(wildcard mk/*.mk))

test: setup header-check build $(TEST_SUITES)
	@echo "make test: all suites passed ($(TEST_SUITES))"

test-rust: setup
	$(HEARTBEAT) "building and running the Rust tests" cargo test --quiet $(TEST_FEATURES)

# No file of the crate imports another that imports it back, directly or around a loop; and
# every name of the README's naming table is in the ABI manifest or defined in its language.
test-structure:
	python3 tools/import_cycles.py src
	python3 tools/schema.py --check
	python3 tools/naming_table.py
	bash tools/test_heartbeat.sh

# The crates as crates.io takes them: both package (`cargo package --workspace`, the derive
# crate first; `make package` also builds them from the packaged sources, about 4 minutes), and
# the API documentation builds without a warning. `cargo test` (test-rust) runs its examples.
test-package: setup
	cargo package --workspace --no-verify --allow-dirty --quiet 2>&1 | { grep -v '^warning: ignoring' || true; }
	RUSTDOCFLAGS="-D warnings" $(HEARTBEAT) "documenting the crate" cargo doc --no-deps

package: setup
	cargo package --workspace

# The core library, the default build, without the demonstration model (the `models` feature):
# it builds; neither it nor the build without default features depends on the tokenizer or its
# regex engine; it exports no tr_minilm_*; and the Python binding loads it and runs an op, while
# the model's add-on package refuses it with what to do. The library the other suites load is
# built again at the end.
test-core: setup
	$(HEARTBEAT) "building the core library" cargo build --quiet --lib
	for flags in "" --no-default-features; do \
	  ! cargo tree $$flags -e normal | grep -E ' (tokenizers|onig) v' \
	    || { echo "the core (cargo tree $$flags) depends on the model's tokenizer"; exit 1; }; \
	done
	! nm -D --defined-only $(LIB_DIR)/libtensorref.so | grep -w 'tr_minilm_[a-z_]*' \
	  || { echo "the default build exports the model's functions"; exit 1; }
	cd $(ROOT)/bindings/python && TENSORREF_LIB=$(LIB_DIR)/libtensorref.so python3 -c \
	  'import tensorref as tr, tensorref._lib as l; assert l.missing == [], l.missing; assert (tr.ones([2]) + 1).sum().item() == 4'
	mkdir -p build
	cd $(ROOT)/bindings/python && ! TENSORREF_LIB=$(LIB_DIR)/libtensorref.so python3 -c 'import tensorref_minilm' 2>$(ROOT)/build/core-addon.err
	grep -q 'built without the demonstration model' build/core-addon.err || { cat build/core-addon.err; exit 1; }
	$(HEARTBEAT) "building the library the suites load" cargo build --quiet $(TEST_FEATURES)

# The Rust examples, each of which checks its own claims (flat live count, budget, results).
test-examples-rust: setup
	cargo run --quiet $(TEST_FEATURES) --example train_mlp 100
	cargo run --quiet $(TEST_FEATURES) --example flow_stack

# C tests: compiled against the committed header with warnings as errors, run, then run once
# more under AddressSanitizer. ASan works with libtorch loaded (checked: its interceptors catch
# libtensorref/libtorch writing past a C buffer), so valgrind is not needed; leaks are counted by
# the tests themselves (tr_live_handles) and LeakSanitizer stays off. An allocation too large
# returns NULL, as without ASan, so that libtorch's out-of-memory error is the status tested. Every program runs even
# when one fails, so one failure does not hide the others; the recipe fails at the end if any did.
test-c: build
	mkdir -p build/c
	for src in tests/c/*.c; do \
	  name=$$(basename $$src .c); \
	  cc $(CFLAGS_STRICT) -g $$src -o build/c/$$name $(LINK); \
	  cc $(CFLAGS_STRICT) -g -fsanitize=address -fno-omit-frame-pointer $$src -o build/c/$$name-asan $(LINK); \
	done
	failed=""; \
	for src in tests/c/*.c; do t=build/c/$$(basename $$src .c); \
	  echo "== $$t"; $$t || failed="$$failed $$t"; done; \
	for src in tests/c/*.c; do t=build/c/$$(basename $$src .c)-asan; \
	  echo "== $$t (AddressSanitizer)"; ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 $$t || failed="$$failed $$t"; done; \
	if [ -n "$$failed" ]; then echo "test-c: FAILED:$$failed"; exit 1; fi

# ---------------------------------------------------------------- benchmarks
# Each language adds its benchmark in mk/<language>.mk: `BENCH_SUITES += bench-<language>`.
bench: setup $(BENCH_SUITES)
	cargo bench

# The per-op overhead bar, measured two ways: the interleaved `ratios` program (in five processes,
# each its own address layout), and criterion's three functions alternated in their own
# processes (median of 7 rounds).
bench-overhead: setup
	cargo bench --bench ratios
	python3 benches/overhead_rounds.py 7

# A long run: the training benchmark's encoder under Flow with recomputation where cheaper, at a
# quarter of its peak, for SOAK_MINUTES; it fails on any drift of live handles, per-step counters
# or resident memory (benches/training.rs, `soak`).
SOAK_MINUTES ?= 30
soak: setup
	cargo bench --bench training -- --soak $(SOAK_MINUTES)

clean:
	cargo clean
	rm -rf build

# ---------------------------------------------------------------- GPU
# The CUDA test suites, the examples and the demonstration on CUDA device 0 (a GPU machine with
# a Rust toolchain); `make gpu-bundle` packs the same, built here, for a GPU machine without one
# (tools/gpu/bundle.sh; run it there with `bash target/gpu-bundle/run.sh`).
test-cuda: setup $(STAMPS)/model
	cargo test --release --features cuda-tests,models -- --test-threads 1
	cargo run --release --example flow_stack -- --device cuda
	cargo run --release --features models --example minilm_demo -- --device cuda

gpu-bundle: setup $(STAMPS)/model
	bash tools/gpu/bundle.sh

# The bundle's driver fails loudly, checked on the CPU against its own machinery (steps.sh) and
# summary.py: a failed step, a missed bar or a failed output check make it exit non-zero.
test-gpu-driver:
	bash tools/gpu/test_driver.sh

# The PyTorch peers of the residency benchmark on the host, small: every row's whole output
# checked against the reference (the script exits 1 on any failure), and each row's check
# printed. A budget of half the 12 layers' weights, so that the strong stream keeps 3 resident
# and streams 9 (an odd count: its two buffers swap roles from one pass to the next).
PEER_ROWS := resident stream naive-stream cpu
test-bench-peers: setup
	mkdir -p build
	$(VENV)/bin/python3 benches/residency_peers.py --device cpu --width 64 --layers 12 --batch 8 --budget-div 2 \
	  --passes 2 --peers $$(echo $(PEER_ROWS) | tr ' ' ,) | tee build/bench-peers.log
	for row in $(PEER_ROWS); do \
	  grep -qE "^  $${row/-/ } +[0-9.]+ +[0-9.e+-]+ +[0-9.e+-]+ +ok" build/bench-peers.log \
	    || { echo "test-bench-peers: no passing output check for $$row"; exit 1; }; \
	done

# The residency benchmark on the simulated device, small, square layers and OPT-style f16 blocks:
# it exits 1 on a failed output check, a row faster than its bound or Flow loading fewer bytes
# than any schedule can; and each row's whole-output check is printed. A mistyped option stops
# the run, naming it, instead of running the default in its place.
RESIDENCY_ROWS := CPU-only Resident Genoa Flow
test-bench-residency: setup
	mkdir -p build
	cargo test --quiet $(TEST_FEATURES) --bench residency -- --passes 2 | tee build/bench-residency.log
	cargo test --quiet $(TEST_FEATURES) --bench residency -- --passes 2 --shape opt30b --width 128 --layers 8 --batch 64 --dtype f16 \
	  | tee -a build/bench-residency.log
	for row in $(RESIDENCY_ROWS); do \
	  test $$(grep -cE "^$$row .*max \|difference\| .*: ok$$" build/bench-residency.log) -eq 2 \
	    || { echo "test-bench-residency: no passing output check for $$row in each run"; exit 1; }; \
	done
	cargo test --quiet $(TEST_FEATURES) --bench residency -- --dtype fp16 > build/bench-usage.log 2>&1 || true
	grep -qxF "error: --dtype fp16: not one of f32, f16" build/bench-usage.log \
	  || { cat build/bench-usage.log; echo "test-bench-residency: --dtype fp16 was not refused"; exit 1; }
