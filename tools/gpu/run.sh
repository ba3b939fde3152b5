#!/usr/bin/env bash
# Runs every CUDA test and benchmark of libtensorref on this GPU machine and prints one summary
# table last. libtorch is this machine's own PyTorch 2.11 (found through python3). Made by
# `make gpu-bundle`; the MiniLM weights come beside it in ../gpu-model (see tools/gpu/bundle.sh).
#
#     bash gpu-bundle/run.sh [PART...]   parts: tests b2048 shapes opt30b training drift torch-device (default: all),
#                                       or device-training: training's PyTorch rows alone, plain and
#                                       on the tensorref device, without the Rust benchmark
# The parts run in the order given, so a short lease names the most wanted first. Logs and JSON
# results go to ./gpu-results. Each step is cut after $STEP_TIMEOUT seconds (300), and the whole
# run ends within $RUN_SECONDS (540 where $OUT is set, so inside the device tool's 10-minute
# call; unlimited elsewhere): a step with too little time left is skipped, and the summary says
# so. Where $OUT is set (the device tool), the logs so far are packed into $OUT/gpu-results.tgz
# after every step, so a call cut short still brings back what ran, and the summary lands beside
# them at the end. A failed step does not stop the later ones, but the run exits 1 at the end
# when any step (the peers' wheels' install is one) failed or was skipped, or the summary failed
# (steps.sh). It stops at once, exit 2, on a part it does not know, or when this machine's
# PyTorch is not a CUDA build of the release the bundle was built against (torch-version.txt),
# unless TR_ALLOW_TORCH_MISMATCH=1.
set -uo pipefail
export PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)
results=$PWD/gpu-results
[[ -z ${OUT:-} ]] || export RUN_SECONDS=${RUN_SECONDS:-540}
mkdir -p "$results"
source "$here/steps.sh"
all_parts="tests b2048 shapes opt30b training drift torch-device"
parts=${*:-$all_parts}
for part in $parts; do
  [[ " $all_parts device-training " == *" $part "* ]] || { echo "run.sh: no part '$part' (parts: $all_parts device-training)"; exit 2; }
done
wants() { [[ " $parts " == *" $1 "* ]]; }

built=$(cat "$here/torch-version.txt" 2>/dev/null || echo "unknown (no torch-version.txt)")
have=$(python3 -c "import torch; print(torch.__version__)")
if ! torch_matches "$built" "$have"; then
  if [[ ${TR_ALLOW_TORCH_MISMATCH:-} == 1 ]]; then
    echo "run.sh: PyTorch mismatch allowed by TR_ALLOW_TORCH_MISMATCH=1: going on"
  else
    echo "run.sh: STOPPED: this machine's PyTorch $have cannot run a bundle built against $built" \
      "(set TR_ALLOW_TORCH_MISMATCH=1 to run anyway)"
    exit 2
  fi
fi
torch_lib=$(python3 -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
export LD_LIBRARY_PATH="$torch_lib:$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TR_MINILM_CHECK_DIR="$results/minilm-check"
python3 -c "import torch; print('PyTorch', torch.__version__, '|', torch.cuda.get_device_name(0))" | tee "$results/device.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader | tee -a "$results/device.txt"
# The peers' pinned packages (accelerate, pytorch-optimem, diffusers), their other dependencies
# being this machine's: for the parts that run them.
if wants b2048 || wants shapes || wants opt30b || wants torch-device; then
  step install-peers python3 -m pip install --upgrade --no-deps --no-index --target "$results/site" "$here"/wheels/*.whl \
    && export PYTHONPATH="$results/site${PYTHONPATH:+:$PYTHONPATH}"
  # diffusers' own needs, where the machine lacks them: requests and its dependencies, and a
  # stand-in for Pillow (the bundle has no room for its wheel; diffusers imports it, the peer
  # never calls it).
  python3 -c "import requests" 2>/dev/null || step install-requests python3 -m pip install --no-deps --no-index \
    --target "$results/site" "$here"/wheels/missing/*.whl
  python3 -c "import PIL" 2>/dev/null || export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$here/pil_stub"
fi

# The model's weights, back to f32 (both sides read the same values), for the tests.
model_dir="$results/minilm"
if wants tests && [[ -f "$here/../gpu-model/model.f16.safetensors" ]]; then
  mkdir -p "$model_dir" && cp -r "$here/../gpu-model/." "$model_dir/" && rm -f "$model_dir/model.f16.safetensors"
  step minilm-weights-f32 python3 "$here/safetensors_dtype.py" "$here/../gpu-model/model.f16.safetensors" "$model_dir/model.safetensors" F32
  export TR_MINILM_DIR="$model_dir"
fi

# Correctness: every CUDA suite, the examples and the demonstration on CUDA.
part_tests() {
  step test-ops-on-cuda "$here/bin/test-tensorref" --test-threads 1 device_sweep
  step test-residency "$here/bin/test-residency" --test-threads 1
  step test-shared-storage "$here/bin/test-shared_storage" --test-threads 1
  if [[ -n ${TR_MINILM_DIR:-} ]]; then
    step test-minilm "$here/bin/test-minilm" --test-threads 1
    step minilm-vs-sentence-transformers python3 "$here/minilm_check.py" "$model_dir" "$TR_MINILM_CHECK_DIR/runs.json"
    step demo "$here/bin/minilm_demo" --device cuda --timeline "$results/minilm_timeline.json"
  fi
  step test-training "$here/bin/test-training" --test-threads 1
  step example-flow-stack "$here/bin/flow_stack" --device cuda
  step example-flow-stack-c "$here/bin/flow_stack_c" cuda
}

# Benchmarks: ours and the peers, shape by shape.
bench() { # bench NAME RUST-ARGS -- PEER-ARGS
  local name=$1; shift
  local rust=() peers=()
  while [[ $# -gt 0 && $1 != -- ]]; do rust+=("$1"); shift; done
  shift; peers=("$@")
  step "bench-$name" "$here/bin/bench-residency" --device cuda "${rust[@]}" --json "$results/bench-$name.json"
  step "peers-$name" python3 "$here/residency_peers.py" "${peers[@]}" --json "$results/peers-$name.json"
}
lin=(--width 8192 --layers 16)
part_b2048() {
  bench b2048 "${lin[@]}" --batch 2048 --passes 5 -- "${lin[@]}" --batch 2048 --passes 5
}
part_shapes() {
  bench b512 "${lin[@]}" --batch 512 --passes 5 --policies resident,genoa,flow -- "${lin[@]}" --batch 512 --peers resident,stream,naive-stream,accelerate
  bench b8192 "${lin[@]}" --batch 8192 --passes 5 --policies resident,flow -- "${lin[@]}" --batch 8192 --peers resident,stream,naive-stream,accelerate
}
part_opt30b() {
  local opt=(--width 7168 --layers 24 --batch 4096 --dtype f16 --shape opt30b --passes 3)
  bench opt30b "${opt[@]}" --policies resident,flow -- "${opt[@]}" --peers resident,stream,naive-stream
}

# Training under a budget: a BERT-base-sized encoder under Resident, Genoa and Flow at a half and a
# quarter of its unmanaged peak, and PyTorch unmanaged, with save_on_cpu and with checkpointing;
# then the same PyTorch code on the tensorref device at a half, and a quarter with recomputation.
enc=(--width 768 --layers 12 --heads 12 --tokens 128 --batch 32 --steps 12 --warmup 6)
part_training() {
  step bench-training "$here/bin/bench-training" --device cuda "${enc[@]}"
  part_device_training
}
part_device_training() {
  step peers-training python3 "$here/training_peers.py" --device cuda "${enc[@]}" --json "$results/peers-training.json"
  # The same PyTorch code on the tensorref device, in a process of its own (pytorch/pytorch#161129).
  step device-training env PYTHONPATH="$here/python${PYTHONPATH:+:$PYTHONPATH}" TENSORREF_LIB="$here/lib/libtensorref.so" \
    python3 "$here/training_peers.py" --device cuda "${enc[@]}" --tensorref --json "$results/device-training.json"
}

# Fragmentation: the default encoder for 300 steps at a quarter of its peak, with and without
# recomputation. The reserved column's (+N) is how much the caching allocator's peak grew after
# the third step.
part_drift() {
  step bench-drift "$here/bin/bench-training" --device cuda --steps 300 --runs flow,flow+cheaper --budgets 4
}

# The tensorref torch device: unchanged PyTorch models on it against plain PyTorch on CUDA, then
# a Llama-shaped fp16 decoder through a quarter of its weights beside accelerate and the bound.
part_torch_device() {
  step torch-device env PYTHONPATH="$here/python${PYTHONPATH:+:$PYTHONPATH}" TENSORREF_LIB="$here/lib/libtensorref.so" \
    python3 "$here/torch_device_cuda.py" ${TORCH_DEVICE_ARGS:-}
}

for part in $parts; do
  [[ $part == device-training ]] && wants training && continue  # training runs it
  "part_${part//-/_}"
done

finish python3 "$here/summary.py" "$results"
rc=$?
deliver
exit "$rc"
