# The Python binding (bindings/python, package tensorref).
#
#   make test-python    builds the library, installs the package into the venv the ordinary way
#                       (proving `pip install bindings/python` works, C accelerator included),
#                       builds the accelerator in place for the source tree, runs the pytest
#                       suite of bindings/python/tests on target/debug (test_accel.py fails if
#                       the accelerator is not in use, here or in the installed package), runs
#                       the operator, lifetime, scope, release, error, list, callback, scalar,
#                       protocol and habit suites again on the pure-ctypes fallback
#                       (TENSORREF_PURE_PYTHON=1), then
#                       examples/python/train_mlp.py and examples/python/flow_stack.py
#                       (scenario b: Flow under a budget a quarter of the weights) with the
#                       installed package; each fails on a wrong result, a budget overrun or a
#                       moved live handle count; and benches/torch_device_overhead.py, briefly
#                       (its figures on a debug library only show it runs; it fails when an op's
#                       output on the device differs from the CPU's).
#   make bench-python   builds the release library and the accelerator and runs
#                       benches/python/bench_ops.py on them (accelerated and pure ctypes) and
#                       benches/torch_device_overhead.py (the tensorref device's host time per op;
#                       it fails while the median misses the issue's 3 us bar).
#
#   make wheel          a platform wheel in dist/: the package, libtensorref.so (release, the core;
#                       WHEEL_PROFILE=debug takes the suites' library) and the compiled
#                       accelerator; it requires torch==2.11.* and numpy.
#   make test-wheel     builds the wheel from the suites' library and installs it into a fresh
#                       venv outside the tree (tests/install/python_wheel.sh), which runs
#                       `python -m tensorref` and examples/python/* there.
#
# TENSORREF_LIB pins the library each run uses (the package would otherwise take the newer of
# target/release and target/debug). The suite and the benchmark import this source tree, hence
# the in-place build of tensorref._speedups (python-ext; ignored by git).

TEST_SUITES += test-python test-wheel
BENCH_SUITES += bench-python
.PHONY: test-python bench-python python-ext wheel test-wheel

WHEEL_PROFILE ?= release

PY_PURE_TESTS := test_ops.py test_lifetime.py test_scope_facts.py test_scope_ops.py \
  test_deferred_release.py test_errors.py test_accel.py test_lists.py test_callbacks.py \
  test_scalars.py test_protocols.py test_habits.py test_error_messages.py

python-ext: setup
	cd $(ROOT)/bindings/python && python3 -W ignore setup.py --quiet build_ext --inplace
	rm -rf $(ROOT)/bindings/python/build

test-python: build python-ext
	python3 -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall \
	  $(ROOT)/bindings/python
	rm -rf $(ROOT)/bindings/python/build
	TENSORREF_LIB=$(ROOT)/target/debug/libtensorref.so \
	  python3 -m pytest -q -p no:cacheprovider $(ROOT)/bindings/python/tests
	TENSORREF_PURE_PYTHON=1 TENSORREF_LIB=$(ROOT)/target/debug/libtensorref.so \
	  python3 -m pytest -q -p no:cacheprovider $(addprefix $(ROOT)/bindings/python/tests/,$(PY_PURE_TESTS))
	cd $(ROOT)/examples/python && TENSORREF_LIB=$(ROOT)/target/debug/libtensorref.so \
	  python3 train_mlp.py
	cd $(ROOT)/examples/python && TENSORREF_LIB=$(ROOT)/target/debug/libtensorref.so \
	  python3 flow_stack.py
	TENSORREF_LIB=$(ROOT)/target/debug/libtensorref.so python3 $(ROOT)/benches/torch_device_overhead.py \
	  --repeats 200 --model-repeats 2 --op-repeats 5

wheel: setup
	cargo build --quiet --lib $(if $(filter release,$(WHEEL_PROFILE)),--release,$(TEST_FEATURES))
	rm -rf $(ROOT)/dist/tensorref-*.whl $(ROOT)/bindings/python/build
	cd $(ROOT)/bindings/python && TENSORREF_WHEEL_LIB=$(ROOT)/target/$(WHEEL_PROFILE)/libtensorref.so \
	  python3 -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation -w $(ROOT)/dist .
	rm -rf $(ROOT)/bindings/python/build
	@ls $(ROOT)/dist/tensorref-*.whl

test-wheel: build
	$(MAKE) --no-print-directory wheel WHEEL_PROFILE=debug
	tests/install/python_wheel.sh $(ROOT)

bench-python: setup python-ext
	cargo build --quiet --release
	TENSORREF_LIB=$(ROOT)/target/release/libtensorref.so python3 $(ROOT)/benches/python/bench_ops.py
	TENSORREF_LIB=$(ROOT)/target/release/libtensorref.so python3 $(ROOT)/benches/torch_device_overhead.py --judge

# make fuzz SECONDS=600 [FUZZ_ARGS="--policy flow --steps 1000 --avoid-known"]: the fuzzer of
# bindings/python/tests/fuzz_api.py over fresh seeds (each printed) until SECONDS have passed, on
# target/debug; a failure prints its seed, step and last calls, and
# `python bindings/python/tests/fuzz_api.py --seed S --steps N --shrink` minimises it.
.PHONY: fuzz
SECONDS ?= 600
fuzz: build python-ext
	TENSORREF_LIB=$(ROOT)/target/debug/libtensorref.so \
	  python3 $(ROOT)/bindings/python/tests/fuzz_api.py --seconds $(SECONDS) $(FUZZ_ARGS)
