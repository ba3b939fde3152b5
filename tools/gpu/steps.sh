# The GPU bundle driver's machinery, sourced by run.sh (and by test_driver.sh, which checks it on
# the CPU). It expects $results, the folder for the logs, and defines:
#
#   step NAME COMMAND...   runs COMMAND with its output in $results/NAME.log, shows the log's
#                          tail and records NAME's exit status and seconds; it returns that
#                          status, and a failure does not stop the later steps (a GPU lease is
#                          precious). COMMAND is cut after $STEP_TIMEOUT seconds (300), or
#                          sooner where $RUN_SECONDS (the whole run's time, counted from the
#                          driver's start; unset: unlimited) has less left, less $FINISH_SECONDS
#                          (30) kept for the summary; with under $MIN_STEP_SECONDS (20) left the
#                          step is skipped, recorded so. Where $OUT is set, `deliver` follows.
#   deliver                packs the logs and results so far into $OUT/gpu-results.tgz (without
#                          the peers' installed packages and the model's weights), with the
#                          summary beside it once there is one; nothing where $OUT is unset
#   finish COMMAND...      writes the record to $results/status.txt, runs the summary COMMAND with
#                          its output also in $results/summary.txt, and returns 1 when any step
#                          failed or was skipped, or the summary failed, naming them
#   torch_matches BUILT HAVE   whether this machine's PyTorch (HAVE, e.g. 2.11.0+cu130) can run
#                          what was built against BUILT (e.g. 2.11.0+cpu): the same release number,
#                          and HAVE a CUDA build; says why not on stderr
status=()
failed_steps=()
skipped_steps=()

# The seconds STEP may run: its own limit, or less where the run's has less left (0: none left).
step_seconds() {
  local limit=${STEP_TIMEOUT:-300}
  if [[ -n ${RUN_SECONDS:-} ]]; then
    local left=$((RUN_SECONDS - SECONDS - ${FINISH_SECONDS:-30}))
    (( left < ${MIN_STEP_SECONDS:-20} )) && left=0
    (( left < limit )) && limit=$left
  fi
  echo "$limit"
}

step() {
  local name=$1; shift
  local limit rc t0=$SECONDS
  limit=$(step_seconds)
  if (( limit == 0 )); then
    echo "== $name: SKIPPED (${RUN_SECONDS}s for the whole run, ${SECONDS}s gone)"
    status+=("$name|skipped|0")
    skipped_steps+=("$name")
    deliver
    return 1
  fi
  echo "== $name (at most ${limit}s)"
  timeout "$limit" "$@" > "$results/$name.log" 2>&1
  rc=$?
  tail -n 25 "$results/$name.log"
  status+=("$name|$rc|$((SECONDS - t0))")
  if (( rc != 0 )); then
    failed_steps+=("$name")
    echo "== $name: FAILED (exit status $rc$( (( rc == 124 )) && echo ", cut after ${limit}s"))"
  fi
  deliver
  return "$rc"
}

write_status() {
  : > "$results/status.txt"
  (( ${#status[@]} == 0 )) || printf '%s\n' "${status[@]}" > "$results/status.txt"
}

deliver() {
  [[ -n ${OUT:-} ]] || return 0
  write_status
  tar -C "$results" --exclude site --exclude minilm -czf "$OUT/gpu-results.tgz" .
  [[ ! -f $results/summary.txt ]] || cp "$results/summary.txt" "$OUT/"
}

finish() {
  echo
  echo "== summary"
  write_status
  "$@" | tee "$results/summary.txt"
  local rc=${PIPESTATUS[0]}
  (( ${#failed_steps[@]} == 0 )) || echo "FAILED steps: ${failed_steps[*]}"
  (( ${#skipped_steps[@]} == 0 )) || echo "SKIPPED steps (no time left): ${skipped_steps[*]}"
  (( rc == 0 )) || echo "FAILED: the summary (exit status $rc)"
  (( ${#failed_steps[@]} == 0 && ${#skipped_steps[@]} == 0 && rc == 0 )) || return 1
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
