# The GPU bundle driver's machinery, sourced by run.sh (and by test_driver.sh, which checks it on
# the CPU). It expects $results, the folder for the logs, and defines:
#
#   step NAME COMMAND...   runs COMMAND (cut after $STEP_TIMEOUT seconds, 300 by default) with its
#                          output in $results/NAME.log, shows the log's tail and records NAME's exit
#                          status and seconds; it returns that status, and a failure does not stop
#                          the later steps (a GPU lease is precious)
#   finish COMMAND...      writes the record to $results/status.txt, runs the summary COMMAND with
#                          its output also in $results/summary.txt, and returns 1 when any step or
#                          the summary failed, naming them
#   torch_matches BUILT HAVE   whether this machine's PyTorch (HAVE, e.g. 2.11.0+cu130) can run
#                          what was built against BUILT (e.g. 2.11.0+cpu): the same release number,
#                          and HAVE a CUDA build; says why not on stderr
status=()
failed_steps=()

step() {
  local name=$1; shift
  echo "== $name"
  local t0=$SECONDS rc
  timeout "${STEP_TIMEOUT:-300}" "$@" > "$results/$name.log" 2>&1
  rc=$?
  tail -n 25 "$results/$name.log"
  status+=("$name|$rc|$((SECONDS - t0))")
  if (( rc != 0 )); then
    failed_steps+=("$name")
    echo "== $name: FAILED (exit status $rc)"
  fi
  return "$rc"
}

finish() {
  echo
  echo "== summary"
  : > "$results/status.txt"
  (( ${#status[@]} == 0 )) || printf '%s\n' "${status[@]}" > "$results/status.txt"
  "$@" | tee "$results/summary.txt"
  local rc=${PIPESTATUS[0]}
  (( ${#failed_steps[@]} == 0 )) || echo "FAILED steps: ${failed_steps[*]}"
  (( rc == 0 )) || echo "FAILED: the summary (exit status $rc)"
  (( ${#failed_steps[@]} == 0 && rc == 0 )) || return 1
  echo "every step passed and the summary met every bar"
}

torch_matches() {
  local built=$1 have=$2
  if [[ ${built%%+*} != "${have%%+*}" ]]; then
    echo "PyTorch here is $have; the bundle was built against $built: the release numbers differ" >&2
    return 1
  fi
  if [[ $have != *+cu* ]]; then
    echo "PyTorch here is $have, not a CUDA build (+cuXXX)" >&2
    return 1
  fi
}
