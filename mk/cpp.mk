# The C++ binding (include/tensorref.hpp) and the native examples.
#
#   make test-cpp               tests/cpp: every test_*.cpp is its own translation unit and all are
#                               linked into one program with main.cpp (which proves the header
#                               ODR-safe), built with warnings as errors; it runs once under
#                               AddressSanitizer + UndefinedBehaviorSanitizer and once plain. Before
#                               it, abi_mismatch.cpp, built against a header of another ABI version,
#                               must be refused by the binding. test_weights.cpp and test_minilm.cpp
#                               load all-MiniLM-L6-v2 (mk/model.mk installs it; tests/cpp/model_files.hpp
#                               finds it); test_minilm.cpp uses the model add-on's header
#                               (include/tensorref_minilm.hpp; the library is built with `models`).
#   make test-examples-native   builds the C examples (C11, -Wpedantic -Werror) and the C++ ones,
#                               runs each (each checks its own claims and exits 1 otherwise), and
#                               checks that C and C++ agree: train_mlp reaches the same final loss,
#                               flow_stack (scenario b: layers 4x the budget under Flow on the
#                               simulated device) prints the same per-pass table and peak (same ops,
#                               same seed); and examples/cpp/aten_device.cpp, the same stack in
#                               ATen over handles as `tensorref` device tensors (include/tensorref_torch.hpp),
#                               equal to ATen on the CPU.
#
# Objects are built by pattern rules, so a second run recompiles only what changed.

TEST_SUITES += test-cpp test-examples-native
.PHONY: test-cpp test-examples-native

CXXFLAGS_STRICT := -std=c++17 -Wall -Wextra -Wpedantic -Werror -I$(ROOT)/include -g
CXX_SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
CPP_HEADERS := include/tensorref.h include/tensorref_ops.h include/tensorref.hpp \
               include/tensorref_enums_generated.hpp include/tensorref_ops_generated.hpp \
               include/tensorref_functions_generated.hpp include/tensorref_operators_generated.hpp \
               include/tensorref_stats_generated.hpp include/tensorref_minilm.h \
               include/tensorref_minilm.hpp include/tensorref_minilm_enums_generated.hpp \
               $(wildcard include/tensorref/*.hpp)
CPP_TEST_UNITS := main $(patsubst tests/cpp/%.cpp,%,$(sort $(wildcard tests/cpp/test_*.cpp)))

build/cpp/%.o: tests/cpp/%.cpp $(CPP_HEADERS) tests/cpp/harness.hpp tests/cpp/model_files.hpp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_STRICT) -c $< -o $@

build/cpp/asan/%.o: tests/cpp/%.cpp $(CPP_HEADERS) tests/cpp/harness.hpp tests/cpp/model_files.hpp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_STRICT) $(CXX_SANITIZE) -c $< -o $@

build/cpp/tests: $(CPP_TEST_UNITS:%=build/cpp/%.o)
	$(CXX) $^ -o $@ $(LINK)

build/cpp/tests-asan: $(CPP_TEST_UNITS:%=build/cpp/asan/%.o)
	$(CXX) $(CXX_SANITIZE) $^ -o $@ $(LINK)

build/cpp/abi_mismatch: build/cpp/abi_mismatch.o
	$(CXX) $^ -o $@ $(LINK)

# The main suite runs last, so that its `N passed, N failed` closes the output.
test-cpp: build $(STAMPS)/model build/cpp/tests build/cpp/tests-asan build/cpp/abi_mismatch
	@echo "== build/cpp/abi_mismatch (built against a header of ABI version 9999)"
	build/cpp/abi_mismatch
	@echo "== build/cpp/tests-asan (AddressSanitizer, UndefinedBehaviorSanitizer)"
	ASAN_OPTIONS=detect_leaks=0 build/cpp/tests-asan
	@echo "== build/cpp/tests"
	build/cpp/tests

build/examples/%_c: examples/c/%.c include/tensorref.h include/tensorref_ops.h
	@mkdir -p $(@D)
	cc $(CFLAGS_STRICT) -g $< -o $@ $(LINK) -lm

build/examples/%_cpp: examples/cpp/%.cpp $(CPP_HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_STRICT) $< -o $@ $(LINK)

# An example in ATen compiles against the libtorch the library runs on (the venv's torch), whose
# headers are system headers (warnings as errors apply to ours).
TORCH_DIR = $(shell $(VENV)/bin/python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
ATEN_FLAGS = -isystem $(TORCH_DIR)/include -isystem $(TORCH_DIR)/include/torch/csrc/api/include \
  -D_GLIBCXX_USE_CXX11_ABI=$(shell $(VENV)/bin/python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
ATEN_LINK = -L$(TORCH_DIR)/lib -ltorch_cpu -lc10 -Wl,-rpath,$(TORCH_DIR)/lib

build/examples/aten_device_cpp: examples/cpp/aten_device.cpp include/tensorref_torch.hpp $(CPP_HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_STRICT) $(ATEN_FLAGS) $< -o $@ $(LINK) $(ATEN_LINK)

NATIVE_EXAMPLES := train_mlp flow_stack llama_layer

# The Llama layer's weights, input and transformers' output, which the C and C++ versions compare
# theirs with: written by the Python version (examples/python/llama_layer.py).
build/examples/llama_layer.safetensors: examples/python/llama_layer.py | build
	@mkdir -p $(@D)
	PYTHONPATH=$(ROOT)/bindings/python TENSORREF_LIB=$(LIB_DIR)/libtensorref.so python3 $< --fixture $@

test-examples-native: build $(foreach e,$(NATIVE_EXAMPLES),build/examples/$(e)_c build/examples/$(e)_cpp) \
  build/examples/aten_device_cpp build/examples/llama_layer.safetensors
	build/examples/aten_device_cpp
	build/examples/train_mlp_c | tee build/examples/train_mlp_c.out
	build/examples/train_mlp_cpp | tee build/examples/train_mlp_cpp.out
	c=$$(grep '^final loss' build/examples/train_mlp_c.out); \
	cpp=$$(grep '^final loss' build/examples/train_mlp_cpp.out); \
	if [ "$$c" != "$$cpp" ]; then echo "C and C++ differ: '$$c' vs '$$cpp'"; exit 1; fi; \
	echo "C and C++ examples agree: $$c"
	build/examples/flow_stack_c | tee build/examples/flow_stack_c.out
	build/examples/flow_stack_cpp | tee build/examples/flow_stack_cpp.out
	c=$$(grep -E '^ +[0-9]+ |^peak ' build/examples/flow_stack_c.out); \
	cpp=$$(grep -E '^ +[0-9]+ |^peak ' build/examples/flow_stack_cpp.out); \
	if [ -z "$$c" ] || [ "$$c" != "$$cpp" ]; then echo "flow_stack: C and C++ tables differ"; exit 1; fi; \
	echo "C and C++ flow_stack examples agree on every pass's counters and the peak"
	build/examples/llama_layer_c build/examples/llama_layer.safetensors
	build/examples/llama_layer_cpp build/examples/llama_layer.safetensors
