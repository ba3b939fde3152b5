#!/usr/bin/env bash
# Checks on the CPU that the GPU bundle's driver fails loudly (make test-gpu-driver): a tiny
# driver built on run.sh's own machinery (steps.sh) and summary.py must exit non-zero with FAILED
# in its summary when one step fails and 0 when all pass; summary.py must exit non-zero on
# synthetic results with a missed bar, a row faster than its bound, a failed output check or a
# benchmark that says it failed, and 0 on results that meet every bar; and the PyTorch check must
# take a CUDA build of the same release only.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

expect() { # expect DESCRIPTION WANTED GOT: WANTED is 0 or "nonzero"
  local what=$1 want=$2 got=$3
  if [[ $want == 0 && $got == 0 ]] || [[ $want == nonzero && $got != 0 ]]; then
    echo "ok: $what (exit status $got)"
  else
    echo "FAILED: $what: exit status $got, wanted $want"
    failures=$((failures + 1))
  fi
}

expect_in() { # expect_in DESCRIPTION PATTERN FILE
  if grep -q -- "$2" "$3"; then echo "ok: $1"; else echo "FAILED: $1: no '$2' in $3"; failures=$((failures + 1)); fi
}

# A driver as run.sh is: steps, then finish with the summary; its steps are its arguments.
cat > "$tmp/driver.sh" <<EOF
set -uo pipefail
results=\$1; shift
mkdir -p "\$results"
source "$here/steps.sh"
for command in "\$@"; do step "step-\${command%% *}" \$command; done
finish python3 "$here/summary.py" "\$results"
EOF

bash "$tmp/driver.sh" "$tmp/mixed" true false > "$tmp/mixed.out" 2>&1
expect "a driver with a failing step exits non-zero" nonzero $?
expect_in "its summary says the step FAILED" "step-false .*FAILED 1" "$tmp/mixed/summary.txt"
expect_in "its output names the failed step" "FAILED steps: step-false" "$tmp/mixed.out"

bash "$tmp/driver.sh" "$tmp/passing" true true > "$tmp/passing.out" 2>&1
expect "a driver whose steps all pass exits 0" 0 $?
expect_in "its summary says so" "summary: every step passed" "$tmp/passing/summary.txt"

# A run's time: with RUN_SECONDS, a step is cut where the run's time ends, and a step with too
# little left is skipped, which fails the run; with $OUT set, the logs of the steps that ran are
# packed there after each one, so a call cut short still brings them back.
mkdir -p "$tmp/out"
RUN_SECONDS=5 FINISH_SECONDS=2 MIN_STEP_SECONDS=1 OUT="$tmp/out" \
  bash "$tmp/driver.sh" "$tmp/deadline" true "sleep 60" true > "$tmp/deadline.out" 2>&1
expect "a driver whose time ran out exits non-zero" nonzero $?
expect_in "the step that outran it was cut" "step-sleep: FAILED (exit status 124, cut after" "$tmp/deadline.out"
expect_in "the step after it was skipped" "step-true: SKIPPED" "$tmp/deadline.out"
expect_in "its summary says the step was SKIPPED" "step-true .*SKIPPED" "$tmp/deadline/summary.txt"
expect_in "its output names the skipped step" "SKIPPED steps (no time left): step-true" "$tmp/deadline.out"
tar -xzf "$tmp/out/gpu-results.tgz" -C "$tmp/out" ./step-true.log ./status.txt 2>/dev/null
expect "the logs so far were packed into \$OUT" 0 $?
expect_in "with the steps recorded so far" "step-sleep|124|" "$tmp/out/status.txt"
RUN_SECONDS=5 FINISH_SECONDS=2 MIN_STEP_SECONDS=1 bash "$tmp/driver.sh" "$tmp/in-time" true true > /dev/null 2>&1
expect "a driver whose steps end within RUN_SECONDS exits 0" 0 $?

# run.sh refuses a part it does not know before it runs anything.
(cd "$tmp" && bash "$here/run.sh" training torch_device > "$tmp/unknown.out" 2>&1)
expect "run.sh with a misspelt part exits 2" 0 $(( $? == 2 ? 0 : 1 ))
expect_in "and names it" "no part 'torch_device'" "$tmp/unknown.out"

# Synthetic results of one shape: ours and the peers' JSON as the benchmarks write them. The
# passing set meets every bar; each failing set changes one thing.
results() { # results DIR FLOW_MS FLOW_BOUND_MS PEERS_STREAM_OK BENCH_OK
  mkdir -p "$1"
  echo "bench-b2048|0|12" > "$1/status.txt"
  cat > "$1/bench-b2048.json" <<EOF
{"width":8192,"layers":16,"batch":2048,"dtype":"F32","shape":"linear","weight_bytes":4294967296,
 "budget":1073741824,"bandwidth":55000000000,"ok":$5,"rows":[
 {"name":"Resident (fits: no budget)","ms":87.3,"loaded":0,"written":0,"model_efficiency":null,
  "max_diff":0.0,"tolerance":1e-4,"ok":true,"peak_device":4400000000,"peak_reserved":4500000000},
 {"name":"Flow","ms":$2,"loaded":4200000000,"written":0,"model_efficiency":1.0,"max_diff":2e-7,
  "tolerance":1e-4,"ok":true,"bound_ms":$3,"min_bound_ms":60.0,"peak_device":1000000000,
  "peak_reserved":1070000000}]}
EOF
  cat > "$1/peers-b2048.json" <<EOF
{"device":"cuda","bandwidth":55000000000,"weight_bytes":4294967296,"budget":1073741824,"ok":$4,
 "rows":{"stream":92.0,"naive stream":95.0,"accelerate":730.0,"resident":87.5},
 "details":{"stream":{"max_diff":1e-6,"tolerance":1e-4,"ok":$4,"peak_allocated":1000000000,
   "peak_reserved":1050000000,"budget":1073741824,"resident_layers":1},
  "naive stream":{"max_diff":1e-6,"tolerance":1e-4,"ok":true},
  "accelerate":{"max_diff":1e-6,"tolerance":1e-4,"ok":true},
  "resident":{"max_diff":0.0,"tolerance":1e-4,"ok":true}}}
EOF
}

check_summary() { # check_summary DESCRIPTION WANTED PATTERN DIR
  python3 "$here/summary.py" "$4" > "$4.out" 2>&1
  expect "summary.py on $1" "$2" $?
  expect_in "summary.py on $1 prints $3" "$3" "$4.out"
}

results "$tmp/good" 88.5 76.3 true true
check_summary "results meeting every bar" 0 "Flow / PyTorch stream .* ok" "$tmp/good"
results "$tmp/slow" 110.0 76.3 true true
check_summary "a Flow slower than the stream peer by 20%" nonzero "Flow / PyTorch stream .* MISSED" "$tmp/slow"
results "$tmp/suspect" 88.5 95.0 true true
check_summary "a Flow faster than its own bound" nonzero "SUSPECT" "$tmp/suspect"
results "$tmp/wrong" 88.5 76.3 false true
check_summary "a peer whose output check failed" nonzero "PyTorch stream .*FAILED" "$tmp/wrong"
results "$tmp/bench-failed" 88.5 76.3 true false
check_summary "a benchmark that says it failed" nonzero "bench-b2048.json says its run failed" "$tmp/bench-failed"

# The PyTorch check: the release number must match, and this machine's must be a CUDA build.
source "$here/steps.sh"
torch_matches 2.11.0+cpu 2.11.0+cu130 2>/dev/null
expect "a CUDA build of the release built against is taken" 0 $?
torch_matches 2.11.0+cu130 2.10.1+cu128 2>/dev/null
expect "another release is refused" nonzero $?
torch_matches 2.11.0+cu130 2.11.0+cpu 2>/dev/null
expect "a CPU build is refused" nonzero $?

if (( failures > 0 )); then
  echo "test_driver.sh: $failures FAILED"
  exit 1
fi
echo "test_driver.sh: every check passed"
