# The Python binding (bindings/python, package tensorref).
#
#   make test-python    builds the library, installs the package into the venv the ordinary way
#                       (proving `pip install bindings/python` works), runs the pytest suite of
#                       bindings/python/tests on target/debug, then examples/python/train_mlp.py
#                       and examples/python/flow_stack.py (scenario b: Flow under a budget a
#                       quarter of the weights) with the installed package; each fails on a
#                       wrong result, a budget overrun or a moved live handle count.
#   make bench-python   builds the release library and runs benches/python/bench_ops.py on it.
#
# TENSORREF_LIB pins the library each run uses (the package would otherwise take the newer of
# target/release and target/debug).

TEST_SUITES += test-python
BENCH_SUITES += bench-python
.PHONY: test-python bench-python

test-python: build
	python3 -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall \
	  $(ROOT)/bindings/python
	rm -rf $(ROOT)/bindings/python/build
	TENSORREF_LIB=$(ROOT)/target/debug/libtensorref.so \
	  python3 -m pytest -q -p no:cacheprovider $(ROOT)/bindings/python/tests
	cd $(ROOT)/examples/python && TENSORREF_LIB=$(ROOT)/target/debug/libtensorref.so \
	  python3 train_mlp.py
	cd $(ROOT)/examples/python && TENSORREF_LIB=$(ROOT)/target/debug/libtensorref.so \
	  python3 flow_stack.py

bench-python: setup
	cargo build --quiet --release
	TENSORREF_LIB=$(ROOT)/target/release/libtensorref.so python3 $(ROOT)/benches/python/bench_ops.py
