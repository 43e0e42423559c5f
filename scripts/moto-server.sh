#!/usr/bin/env bash
# moto's server (https://github.com/getmoto/moto), an EC2 nobody on this project wrote: the
# test that runs the agent's EC2 paths against both it and the lab's emulator
# (test/lab/ec2/moto-twice.test.ts) starts it through this script, and scripts/setup.sh checks with it
# that the machine has it.
#
#   scripts/moto-server.sh --check    print the Python that has moto and moto's version; exit 1 if none
#   scripts/moto-server.sh PORT       serve on 127.0.0.1:PORT (loopback only) until killed
#
# moto lives in the machine image's Python (pyenv), whose shims a non-interactive shell's PATH
# may lack: the first of python3 on PATH, pyenv's shim, then pyenv's installed versions that can
# import moto.server is used, as `python -m moto.server` (the moto_server entry point without
# depending on where pip put it).
set -euo pipefail

pyenv_root="${PYENV_ROOT:-${HOME:-/root}/.pyenv}"
candidates=()
command -v python3 >/dev/null 2>&1 && candidates+=("$(command -v python3)")
candidates+=("$pyenv_root/shims/python3")
for version in "$pyenv_root"/versions/*/bin/python3; do candidates+=("$version"); done

python=""
for candidate in "${candidates[@]}"; do
  if [ -x "$candidate" ] && "$candidate" -c 'import moto.server' >/dev/null 2>&1; then
    python="$candidate"
    break
  fi
done
if [ -z "$python" ]; then
  echo "moto-server: no Python here can import moto.server (tried: ${candidates[*]})." >&2
  echo "moto-server: install moto with its server extras (pip install 'moto[server]') into the machine's Python." >&2
  exit 1
fi

case "${1:-}" in
  --check)
    version="$("$python" -c 'import importlib.metadata as m; print(m.version("moto"))')"
    echo "moto $version ($python)"
    ;;
  '' | *[!0-9]*)
    echo "usage: scripts/moto-server.sh --check | PORT" >&2
    exit 2
    ;;
  *)
    exec "$python" -m moto.server -H 127.0.0.1 -p "$1"
    ;;
esac
