#!/usr/bin/env bash
# `npm test`: the type-check, lint, the formatter's check, the import-cycle check (dpdm, type
# imports included) and every tap test (tap's options are package.json's "tap");
# exits non-zero when any of them fails. Arguments go to tap (`npm test -- test/config/config.test.ts`).
#
# What runs at once, for wall time on a small machine (none of it writes what another reads):
# - as root, the engine machines' root file systems start building first, in the background
#   (scripts/rootfs.ts): a first build takes minutes and would otherwise start only when the
#   nspawn tests reach it. The tests use the same cache and lock (src/lab/machines/nspawn-rootfs.ts), so
#   they wait for that build or, if it failed, make their own: the result does not depend on it;
# - the type-check, lint, the formatter's check and the cycle check run beside tap (they only
#   read the sources); their output is shown when they end, and their failure fails `npm test`
#   as tap's does;
# - tap runs two test files at once (package.json "tap": "jobs"; tap's own default leaves a core
#   free, so one at a time on 2 cores): most lab files spend their time waiting on devices,
#   dockerd, nspawn machines and the emulator's delays, and every lab has a root, loop devices,
#   dockerds and machines of its own. "serial" files run one at a time: the herd (the load test,
#   sized to the machine's cores) and the files that boot systemd machines (lab-demo-engine,
#   nspawn-boot, nspawn-containerd, nspawn-golden), whose release at a machine's poweroff or reboot was seen missing
#   with two machines' files running at once (and once on main, alone in the suite).
# - with no arguments, tap runs in two lanes at once: the serial files one at a time in one lane
#   (after the long files that lane also takes), every other file two at a time in the other. No
#   two machine files ever run at once, and the serial lane's minutes (the machines boot for about
#   seven) overlap the other lane's instead of following it: run one after the other, the suite
#   took over 30 minutes on CI's two cores, with a third of their time idle. The serial lane's
#   output is shown when it ends; the last line is both lanes' summary in tap's form,
#   `# { total: N, pass: N, fail: N }`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# As npm runs it (its Node 24 and tap first on PATH), also when run as `bash scripts/test.sh`.
export PATH="$PWD/node_modules/.bin:$PATH"

work=$(mktemp -d -t ebs-cache-agent-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
# The golden build most lab files start from, built by the first and reused by the others for
# this run only (src/lab/volumes/golden-reuse.ts): removed with $work, so a change to the build
# is always built.
export EBS_CACHE_LAB_GOLDEN_REUSE="$work/golden"
# Likewise the agent's production build, for the tests that run it as a process
# (test/fixtures/lab/agent-bundle.ts): built by the first file that asks, with the compile cache
# its processes share.
export EBS_CACHE_AGENT_TEST_BUNDLE="$work/agent"

rootfs_pid=
if [ "$(id -u)" = 0 ]; then
  tsx scripts/rootfs.ts >"$work/rootfs.log" 2>&1 &
  rootfs_pid=$!
fi

# `name` `command…`: runs in the background, its output kept for show().
declare -A pids=()
background() {
  local name=$1
  shift
  "$@" >"$work/$name.log" 2>&1 &
  pids[$name]=$!
}
# Waits for `name`, shows its output; returns its exit status.
show() {
  local name=$1 status=0
  wait "${pids[$name]}" || status=$?
  echo "# npm run $name: $([ "$status" -eq 0 ] && echo ok || echo "FAILED (exit $status)")"
  cat "$work/$name.log"
  return "$status"
}

background typecheck npm run --silent typecheck
background lint npm run --silent lint
background format npm run --silent format:check
background cycles npm run --silent cycles
# `name` `tap arguments…`: one tap run in the background lane, its output kept in $work/name.tap
# (shown when it ends) and its exit status in $work/name.status.
tap_run() {
  local name=$1
  shift
  tap "$@" >"$work/$name.tap" 2>&1
  echo "$?" >"$work/$name.status"
}
# `name`: adds a lane's summary counts; returns the lane's exit status.
total=0 pass=0 fail=0
count_lane() {
  local name=$1 summary code
  code=$(cat "$work/$name.status" 2>/dev/null || echo 1)
  summary=$(grep -E '^# \{ total: [0-9]+' "$work/$name.tap" | tail -n 1)
  total=$((total + $(count_of total "$summary")))
  pass=$((pass + $(count_of pass "$summary")))
  fail=$((fail + $(count_of fail "$summary")))
  # A lane that failed with no summary (tap itself could not run) counts as one failure.
  if [ "$code" -ne 0 ] && [ -z "$summary" ]; then fail=$((fail + 1)); fi
  return "$code"
}
# `key` `summary`: the count tap's summary line gives for key (0 when it gives none).
count_of() {
  local n
  n=$(sed -nE "s/.*[{ ]$1: ([0-9]+).*/\1/p" <<<"$2")
  echo "${n:-0}"
}

# tap's test class must be built with the plugins package.json names before tap starts: a run
# that finds the built list stale starts its own test files with the old list's loaders (after a
# fresh `npm ci`, ts-node in every file). scripts/tap-build.mjs builds it when it is stale.
node scripts/tap-build.mjs || exit 1

status=0
if [ "$#" -gt 0 ]; then
  tap "$@" || status=$?
else
  mapfile -t serial < <(node -p 'require("./package.json").tap.serial.join("\n")')
  # The serial lane also takes the longest lab files that need not be serial, so that the two
  # lanes end together: on CI's two cores the serial files take ~10 minutes and the rest ~45 of
  # file time (two at a time), which these ~14.5 minutes of files even out (the log's `# lanes
  # ended` line tells whether they still do). One file at a time in this
  # lane, so no more files run at once than before.
  long=(
    test/lab/machines/osparc-scenarios.lab.test.ts
    test/lab/machines/osparc-tenant.lab.test.ts
    test/cli/external-failures.lab.test.ts
    test/agent/boot/symlink.lab.test.ts
    test/agent/boot/foreign.lab.test.ts
    test/agent/boot/converge.lab.test.ts
    test/agent/release/stop.lab.test.ts
  )
  exclude=()
  for file in "${serial[@]}" "${long[@]}"; do exclude+=(--exclude "$file"); done
  # The long files first, in a tap run of their own (tap orders the files it is given by name): the
  # machine files need the engines' root file systems, whose first build (started above) takes
  # minutes of the same two cores, and would otherwise wait for it halfway through the lane.
  (
    tap_run long --jobs=1 "${long[@]}"
    tap_run serial --jobs=1 "${serial[@]}"
    echo "$SECONDS" >"$work/serial.ended"
  ) &
  serial_pid=$!
  # The other lane's output is shown as it comes (a long run is not silent).
  tap "${exclude[@]}" | tee "$work/parallel.tap"
  echo "${PIPESTATUS[0]}" >"$work/parallel.status"
  parallel_ended=$SECONDS
  wait "$serial_pid"
  count_lane parallel || status=1
  cat "$work/long.tap" "$work/serial.tap"
  count_lane long || status=1
  count_lane serial || status=1
  # Where the wall time went, for keeping CI's run short: each lane's end, in seconds from the start.
  echo "# lanes ended (s): two at a time $parallel_ended, one at a time $(cat "$work/serial.ended" 2>/dev/null || echo '?')"
  echo "# { total: $total, pass: $pass, fail: $fail }"
fi
show typecheck || status=1
show lint || status=1
show format || status=1
show cycles || status=1

# Never leave the build running behind `npm test`: whatever it finished stays cached.
if [ -n "$rootfs_pid" ]; then
  wait "$rootfs_pid" || true
  sed 's/^/# /' "$work/rootfs.log"
fi
exit "$status"
