#!/usr/bin/env bash
# `npm test`: the type-check, lint and every tap test (tap's options are package.json's "tap");
# exits non-zero when any of them fails. Arguments go to tap (`npm test -- test/config.test.ts`).
#
# As root, the engine machines' root file systems start building first, in the background
# (scripts/rootfs.ts): a first build takes minutes and would otherwise start only when the
# nspawn tests reach it. The tests use the same cache and lock (src/lab/nspawn-rootfs.ts), so
# they wait for that build or, if it failed, make their own: the result does not depend on it.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# As npm runs it (its Node 24 and tap first on PATH), also when run as `bash scripts/test.sh`.
export PATH="$PWD/node_modules/.bin:$PATH"

work=$(mktemp -d -t ebs-cache-agent-test.XXXXXX)
trap 'rm -rf "$work"' EXIT

rootfs_pid=
if [ "$(id -u)" = 0 ]; then
  tsx scripts/rootfs.ts >"$work/rootfs.log" 2>&1 &
  rootfs_pid=$!
fi

# Never leaves the build running behind `npm test` (whatever it finished stays cached) and
# shows its log as TAP comments.
finish() {
  if [ -n "$rootfs_pid" ]; then
    wait "$rootfs_pid" || true
    sed 's/^/# /' "$work/rootfs.log"
  fi
  exit "$1"
}

npm run typecheck || finish 1
npm run lint || finish 1
tap "$@"
finish $?
