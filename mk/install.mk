# Installing the library for C and C++ programs.
#
#   make install PREFIX=/usr/local [INSTALL_PROFILE=release|debug]
#       builds the core library (release by default; debug installs the library the suites built,
#       with the demonstration model's add-on) and installs under PREFIX:
#         lib/libtensorref.so            its RUNPATH finds the libtorch it was built against (the
#                                        project venv's PyTorch wheel)
#         include/                       every C and C++ header, generated ones included (the
#                                        model add-on's only when the library has the model)
#         lib/pkgconfig/tensorref.pc     pkg-config --cflags --libs tensorref
#         lib/cmake/tensorref/           find_package(tensorref CONFIG): tensorref::tensorref
#         share/tensorref/tensorref_abi.json   the ABI manifest
#   make test-install   installs into a temporary prefix, then builds the C and C++ examples in a
#       temporary folder outside the tree against it, once through pkg-config and once through
#       CMake (from Debian's packages when missing), with warnings as errors, and runs each.

TEST_SUITES += test-install
.PHONY: install test-install install-setup

PREFIX ?= /usr/local
INSTALL_PROFILE ?= release
INSTALL_LIB_DIR := $(ROOT)/target/$(INSTALL_PROFILE)
INSTALL_FEATURES := $(if $(filter debug,$(INSTALL_PROFILE)),$(TEST_FEATURES),)
CORE_HEADERS := tensorref.h tensorref_ops.h tensorref.hpp tensorref_torch.hpp \
  tensorref_enums_generated.hpp tensorref_ops_generated.hpp tensorref_functions_generated.hpp \
  tensorref_operators_generated.hpp tensorref_stats_generated.hpp
MODEL_HEADERS := tensorref_minilm.h tensorref_minilm.hpp tensorref_minilm_enums_generated.hpp

install: setup
	cargo build --lib $(if $(filter release,$(INSTALL_PROFILE)),--release,) $(INSTALL_FEATURES)
	install -d $(PREFIX)/lib/pkgconfig $(PREFIX)/lib/cmake/tensorref $(PREFIX)/include/tensorref \
	  $(PREFIX)/share/tensorref
	install -m 755 $(INSTALL_LIB_DIR)/libtensorref.so $(PREFIX)/lib/libtensorref.so
	install -m 644 $(addprefix include/,$(CORE_HEADERS)) $(PREFIX)/include/
	install -m 644 include/tensorref/*.hpp $(PREFIX)/include/tensorref/
	if nm -D --defined-only $(INSTALL_LIB_DIR)/libtensorref.so | grep -w tr_minilm_load >/dev/null; then \
	  install -m 644 $(addprefix include/,$(MODEL_HEADERS)) $(PREFIX)/include/; fi
	install -m 644 include/tensorref_abi.json $(PREFIX)/share/tensorref/
	runpath=$$(readelf -d $(PREFIX)/lib/libtensorref.so | sed -n 's/.*R[UN]*PATH.*\[\(.*\)\]/\1/p'); \
	libtorch=$${runpath%%:*}; \
	for f in tensorref.pc:lib/pkgconfig tensorrefConfig.cmake:lib/cmake/tensorref \
	         tensorrefConfigVersion.cmake:lib/cmake/tensorref; do \
	  sed -e 's|@PREFIX@|$(abspath $(PREFIX))|g' -e 's|@VERSION@|$(TR_VERSION)|g' \
	      -e 's|@ABI_VERSION@|$(TR_ABI)|g' -e "s|@LIBTORCH_LIB@|$$libtorch|g" \
	      tools/install/$${f%%:*}.in > $(PREFIX)/$${f##*:}/$${f%%:*}; \
	done
	@echo "installed libtensorref $(TR_VERSION) (C ABI $(TR_ABI)) under $(PREFIX)"

install-setup:
	command -v cmake >/dev/null || { apt-get update && apt-get install -y cmake; }

test-install: build install-setup
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(MAKE) --no-print-directory install PREFIX=$$tmp/prefix INSTALL_PROFILE=debug; \
	dynamic=$$(readelf -d $$tmp/prefix/lib/libtensorref.so); \
	grep -q 'SONAME.*\[libtensorref.so\]' <<<"$$dynamic" \
	  || { echo "test-install: the installed library has no SONAME libtensorref.so"; exit 1; }; \
	deps=$$(ldd $$tmp/prefix/lib/libtensorref.so); \
	grep -q 'libtorch_cpu.so => /' <<<"$$deps" \
	  || { echo "test-install: the installed library does not find libtorch by itself"; echo "$$deps"; exit 1; }; \
	test -f $$tmp/prefix/include/tensorref_minilm.h \
	  || { echo "test-install: the model add-on's header is missing beside a library built with it"; exit 1; }; \
	mkdir -p $$tmp/app/c $$tmp/app/cpp; \
	cp examples/c/train_mlp.c examples/c/flow_stack.c $$tmp/app/c/; \
	cp examples/cpp/train_mlp.cpp examples/cpp/flow_stack.cpp $$tmp/app/cpp/; \
	cp tests/install/CMakeLists.txt $$tmp/app/; \
	export PKG_CONFIG_PATH=$$tmp/prefix/lib/pkgconfig; \
	pkg-config --exists 'tensorref >= $(TR_VERSION)'; \
	libdir=$$(pkg-config --variable=libdir tensorref); \
	echo "== pkg-config: $$(pkg-config --cflags --libs tensorref)"; \
	for e in train_mlp flow_stack; do \
	  (cd $$tmp/app && cc -std=c11 -Wall -Wextra -Wpedantic -Werror c/$$e.c -o $$e-pc-c \
	     $$(pkg-config --cflags --libs tensorref) -Wl,-rpath,$$libdir && ./$$e-pc-c > $$e-pc-c.out); \
	  (cd $$tmp/app && c++ -std=c++17 -Wall -Wextra -Wpedantic -Werror cpp/$$e.cpp -o $$e-pc-cpp \
	     $$(pkg-config --cflags --libs tensorref) -Wl,-rpath,$$libdir && ./$$e-pc-cpp > $$e-pc-cpp.out); \
	  echo "pkg-config: $$e in C and C++ built and ran"; \
	done; \
	echo "== CMake: find_package(tensorref CONFIG)"; \
	cmake -S $$tmp/app -B $$tmp/app/build -DCMAKE_PREFIX_PATH=$$tmp/prefix > $$tmp/cmake.log \
	  || { cat $$tmp/cmake.log; exit 1; }; \
	grep 'tensorref: C ABI version $(TR_ABI)' $$tmp/cmake.log; \
	cmake --build $$tmp/app/build -- --no-print-directory > $$tmp/build.log || { cat $$tmp/build.log; exit 1; }; \
	for bin in $$tmp/app/train_mlp-pc-c $$tmp/app/build/train_mlp_cpp; do \
	  deps=$$(ldd $$bin); \
	  grep -q "libtensorref.so => $$tmp/prefix/lib/libtensorref.so" <<<"$$deps" \
	    || { echo "test-install: $$bin does not load the installed library"; echo "$$deps"; exit 1; }; \
	done; \
	for e in train_mlp flow_stack; do \
	  $$tmp/app/build/$${e}_c > $$tmp/app/$$e-cmake-c.out; \
	  $$tmp/app/build/$${e}_cpp > $$tmp/app/$$e-cmake-cpp.out; \
	  cmp $$tmp/app/$$e-pc-c.out $$tmp/app/$$e-cmake-c.out; \
	  echo "CMake: $$e in C and C++ built and ran (C output equal to the pkg-config build's)"; \
	done; \
	echo "test-install: the installed prefix serves pkg-config and CMake builds"
