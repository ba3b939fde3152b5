# The .NET binding (bindings/dotnet): built with Mono's mcs here (no .NET SDK is reachable
# offline; the .csproj files build the same sources with the SDK), tested, its example run, and
# its overhead benchmarked.
#
#   make test-dotnet    the C# suite (prints "N passed, N failed"; its weights and MiniLM tests load
#                       all-MiniLM-L6-v2, installed by mk/model.mk; the MiniLM tests use the
#                       add-on assembly TensorRef.MiniLM.dll, bindings/dotnet/minilm, built beside
#                       the core TensorRef.dll) and the examples in examples/csharp:
#                       TrainMlp.cs (dispose scopes) and FlowStack.cs (the residency manager's Flow)
#   make nuget          the NuGet package, build/nuget/TensorRef.<version>.nupkg: the managed assembly
#                       (lib/net45) and libtensorref.so (runtimes/linux-x64/native; release, or
#                       NUGET_PROFILE=debug for the suites' library), written in NuGet's layout by
#                       tools/install/nupkg.py; it states the libtorch it needs and how it finds one
#   make test-nuget     restores that package with NuGet (Debian's `nuget`) into a fresh project
#                       outside the tree, builds the C# examples against what it restored, and
#                       runs them with the native library it carried
#   make bench-dotnet   4-element add through C# against the same add from C, and what a C#
#                       residency Events handler costs per event (release library)
#
# The library is found through LD_LIBRARY_PATH ([DllImport("tensorref")] -> libtensorref.so), set
# on each mono command below; this works for Mono and the .NET SDK alike, so no Mono-only dllmap
# config is needed.

TEST_SUITES += test-dotnet test-nuget
BENCH_SUITES += bench-dotnet
.PHONY: test-dotnet bench-dotnet dotnet-setup nuget test-nuget nuget-setup

DOTNET_OUT := $(ROOT)/build/dotnet
MCS := mcs -langversion:7.2 -nologo -warnaserror+ -nowarn:1591
MONO := mono --debug

# Every source is listed: mcs has no project system. Keep in step with the .csproj files (which glob).
DOTNET_LIB_SRC := \
  bindings/dotnet/src/DisposeScope.cs \
  bindings/dotnet/src/Errors.cs \
  bindings/dotnet/src/Handles.cs \
  bindings/dotnet/src/Native.cs \
  bindings/dotnet/src/Native.g.cs \
  bindings/dotnet/src/Operators.g.cs \
  bindings/dotnet/src/Ops.g.cs \
  bindings/dotnet/src/Residency.cs \
  bindings/dotnet/src/ResidencyStats.g.cs \
  bindings/dotnet/src/Scalar.cs \
  bindings/dotnet/src/Tensor.cs \
  bindings/dotnet/src/Torch.cs \
  bindings/dotnet/src/Weights.cs
# The demonstration model's add-on: its own assembly, over the core.
DOTNET_MINILM_SRC := \
  bindings/dotnet/minilm/MiniLM.cs \
  bindings/dotnet/minilm/NativeMiniLM.g.cs
DOTNET_TEST_SRC := \
  bindings/dotnet/tests/AbiTests.cs \
  bindings/dotnet/tests/BadInputTests.cs \
  bindings/dotnet/tests/Check.cs \
  bindings/dotnet/tests/HeaderLayoutTests.cs \
  bindings/dotnet/tests/LifetimeTests.cs \
  bindings/dotnet/tests/MiniJson.cs \
  bindings/dotnet/tests/MiniLMTests.cs \
  bindings/dotnet/tests/ModelFiles.cs \
  bindings/dotnet/tests/ResidencyApiTests.cs \
  bindings/dotnet/tests/ResidencyTests.cs \
  bindings/dotnet/tests/Runner.cs \
  bindings/dotnet/tests/SchemaOpsTests.cs \
  bindings/dotnet/tests/ScopeApiTests.cs \
  bindings/dotnet/tests/ScopeFactsTests.cs \
  bindings/dotnet/tests/SignatureTests.cs \
  bindings/dotnet/tests/TensorTests.cs \
  bindings/dotnet/tests/UserIdiomsTests.cs \
  bindings/dotnet/tests/WeightsTests.cs

# Mono from Debian's packages when missing (CI runs as root).
dotnet-setup:
	command -v mcs >/dev/null && command -v mono >/dev/null || { apt-get update && apt-get install -y mono-mcs mono-runtime; }

$(DOTNET_OUT)/TensorRef.dll: $(DOTNET_LIB_SRC) | dotnet-setup
	mkdir -p $(DOTNET_OUT)
	$(MCS) -target:library -optimize+ -debug -out:$@ $(DOTNET_LIB_SRC)

$(DOTNET_OUT)/TensorRef.MiniLM.dll: $(DOTNET_MINILM_SRC) $(DOTNET_OUT)/TensorRef.dll
	$(MCS) -target:library -optimize+ -debug -r:$(DOTNET_OUT)/TensorRef.dll -out:$@ $(DOTNET_MINILM_SRC)

$(DOTNET_OUT)/TensorRef.Tests.exe: $(DOTNET_TEST_SRC) $(DOTNET_OUT)/TensorRef.dll $(DOTNET_OUT)/TensorRef.MiniLM.dll
	$(MCS) -debug -r:$(DOTNET_OUT)/TensorRef.dll -r:$(DOTNET_OUT)/TensorRef.MiniLM.dll -out:$@ $(DOTNET_TEST_SRC)

# Each example is one file: examples/csharp/X.cs -> X.exe.
DOTNET_EXAMPLES := TrainMlp FlowStack

$(DOTNET_OUT)/%.exe: examples/csharp/%.cs $(DOTNET_OUT)/TensorRef.dll
	$(MCS) -debug -r:$(DOTNET_OUT)/TensorRef.dll -out:$@ $<

# A stand-in libtensorref.so reporting ABI 999, for the ABI-mismatch test.
$(DOTNET_OUT)/fake-abi/libtensorref.so: bindings/dotnet/tests/fake_abi.c
	mkdir -p $(dir $@)
	cc -shared -fPIC -o $@ $<

test-dotnet: build $(STAMPS)/model $(DOTNET_OUT)/TensorRef.Tests.exe $(DOTNET_EXAMPLES:%=$(DOTNET_OUT)/%.exe) $(DOTNET_OUT)/fake-abi/libtensorref.so \
  $(DOTNET_OUT)/LlamaLayer.exe build/examples/llama_layer.safetensors
	cd $(DOTNET_OUT) && LD_LIBRARY_PATH=$(LIB_DIR) TR_FAKE_ABI_DIR=$(DOTNET_OUT)/fake-abi $(MONO) TensorRef.Tests.exe
	for ex in $(DOTNET_EXAMPLES); do \
	  echo "== examples/csharp/$$ex.cs"; \
	  (cd $(DOTNET_OUT) && LD_LIBRARY_PATH=$(LIB_DIR) $(MONO) $$ex.exe); \
	done
	@echo "== examples/csharp/LlamaLayer.cs (its weights file: mk/cpp.mk writes it)"
	cd $(DOTNET_OUT) && LD_LIBRARY_PATH=$(LIB_DIR) $(MONO) LlamaLayer.exe $(ROOT)/build/examples/llama_layer.safetensors

# ---------------------------------------------------------------- NuGet package
NUGET_PROFILE ?= release
NUGET_OUT := $(ROOT)/build/nuget

nuget: setup $(DOTNET_OUT)/TensorRef.dll
	cargo build --quiet --lib $(if $(filter release,$(NUGET_PROFILE)),--release,$(TEST_FEATURES))
	rm -f $(NUGET_OUT)/TensorRef.*.nupkg
	python3 tools/install/nupkg.py --version $(TR_VERSION) --abi $(TR_ABI) --assembly $(DOTNET_OUT)/TensorRef.dll \
	  --native $(ROOT)/target/$(NUGET_PROFILE)/libtensorref.so --out $(NUGET_OUT)

nuget-setup: dotnet-setup
	command -v nuget >/dev/null || { apt-get update && apt-get install -y nuget; }

# A project of packages.config's kind, as Mono builds one: NuGet restores the package into its
# packages folder, the assembly is referenced from there and copied beside the program, and the
# native library is found in the package's runtimes folder.
test-nuget: build nuget-setup
	$(MAKE) --no-print-directory nuget NUGET_PROFILE=debug
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	mkdir -p $$tmp/app; cp $(addprefix examples/csharp/,$(DOTNET_EXAMPLES:%=%.cs)) $$tmp/app/; \
	cd $$tmp/app && HOME=$$tmp nuget install TensorRef -Version $(TR_VERSION) -Source $(NUGET_OUT) \
	  -OutputDirectory packages -NonInteractive -NoCache; \
	pkg=$$tmp/app/packages/TensorRef.$(TR_VERSION); \
	test -f $$pkg/runtimes/linux-x64/native/libtensorref.so || { echo "test-nuget: no native library restored"; exit 1; }; \
	cp $$pkg/lib/net45/TensorRef.dll .; \
	for ex in $(DOTNET_EXAMPLES); do \
	  mcs -nologo -warnaserror+ -r:TensorRef.dll -out:$$ex.exe $$ex.cs; \
	  echo "== $$ex.exe (TensorRef $(TR_VERSION) from its NuGet package)"; \
	  LD_LIBRARY_PATH=$$pkg/runtimes/linux-x64/native mono $$ex.exe; \
	done; \
	echo "test-nuget: the package restores into a fresh project and the C# examples run"

# ---------------------------------------------------------------- benchmark (release library)
DOTNET_BENCH := $(DOTNET_OUT)/bench

bench-dotnet: setup dotnet-setup
	cargo build --quiet --release
	mkdir -p $(DOTNET_BENCH)
	cc -std=c11 -O2 -Wall -Wextra -Werror -I$(ROOT)/include -shared -fPIC benches/dotnet/add_loop.c \
	  -o $(DOTNET_BENCH)/libtrbench_add.so -L$(ROOT)/target/release -ltensorref
	$(MCS) -target:library -optimize+ -out:$(DOTNET_BENCH)/TensorRef.dll $(DOTNET_LIB_SRC)
	$(MCS) -optimize+ -r:$(DOTNET_BENCH)/TensorRef.dll -out:$(DOTNET_BENCH)/AddBench.exe benches/dotnet/AddBench.cs
	cd $(DOTNET_BENCH) && LD_LIBRARY_PATH=$(ROOT)/target/release:$(DOTNET_BENCH) mono AddBench.exe
	$(MCS) -optimize+ -r:$(DOTNET_BENCH)/TensorRef.dll -out:$(DOTNET_BENCH)/EventsBench.exe benches/dotnet/EventsBench.cs
	cd $(DOTNET_BENCH) && LD_LIBRARY_PATH=$(ROOT)/target/release mono EventsBench.exe
