#!/usr/bin/env bash
# Runs a long step of the build and says it is alive: where the output is not a terminal (a CI
# log, a pipe), a line every 20 s while the step runs, so that a quiet stretch (pip unpacking
# PyTorch, rustc on the library's own crate for two minutes) never looks like a hang. In a
# terminal the step's own progress bars say it, and nothing is added. Exits with the step's
# status.
#
#     bash tools/heartbeat.sh LABEL COMMAND...      (HEARTBEAT_EVERY=seconds, 20 by default)
set -u
label=$1
shift
if [[ -t 1 ]]; then
  exec "$@"
fi
"$@" &
step=$!
(
  started=$SECONDS
  while sleep "${HEARTBEAT_EVERY:-20}"; do
    echo "  ... $label: still running ($((SECONDS - started)) s)"
  done
) &
beat=$!
trap 'kill $step $beat 2>/dev/null' INT TERM
wait $step
rc=$?
kill $beat 2>/dev/null
wait $beat 2>/dev/null
exit $rc
