#!/usr/bin/env bash
# Installs ebs-cache-agent into a root file system: the running machine (`/`), or an image
# being built (Packer's chroot, a debootstrap tree, the nspawn test's rootfs).
#
#   scripts/install.sh [--bundle FILE] ROOT
#
# What it puts under ROOT:
#   /opt/ebs-cache-agent/ebs-cache-agent.mjs        the bundle's entry (npm run build; plain node >= 22)
#   /opt/ebs-cache-agent/chunks/                    the code it loads per command (dist/chunks/)
#   /usr/local/bin/ebs-cache-agent                  a wrapper: /usr/bin/node /opt/ebs-cache-agent/ebs-cache-agent.mjs "$@"
#                                                   (with Node's compile cache, as the units)
#   /var/cache/ebs-cache-agent/                     created empty: Node's compile cache (NODE_COMPILE_CACHE
#                                                   in the units), filled by the first run (the AMI build warms it)
#   /etc/ebs-cache-agent/config.json                config/config.json, ONLY when absent (an operator's file is kept)
#   /etc/ebs-cache-agent/config.schema.json         its JSON Schema, for editors (`"$schema": "./config.schema.json"`);
#                                                   always replaced: it describes the installed version's keys
#   /etc/systemd/system/ebs-cache-agent*.{service,timer}
#   /etc/systemd/system/multi-user.target.wants/    ebs-cache-agent.service, ebs-cache-agent-ready.service,
#                                                   ebs-cache-agent-release.service
#   /etc/systemd/system/timers.target.wants/        ebs-cache-agent-gc.timer, ebs-cache-agent-prune.timer (ebs-cache-agent-keeper.timer is
#                                                   installed, not enabled: only the hosts that keep the pool run it)
#   /usr/share/doc/ebs-cache-agent/                 operations.md, config.md, boot.md, labels.md, keeper.md, the IAM
#                                                   policies (the agent's, the keeper's reclaim)
#
# The units are enabled by creating the .wants symlinks directly (what `systemctl enable`
# does), so this works in a chroot or on a tree with no systemd running. It runs no systemctl
# and starts nothing; on a live host run `systemctl daemon-reload` afterwards, then
# `systemctl start ebs-cache-agent-release.service` (it only becomes active, so that its
# ExecStop releases the volume at this boot's shutdown; it is started at every later boot).
#
# The bundle is --bundle FILE, else dist/ebs-cache-agent.mjs of this checkout, built with
# `npm run build` when missing (that needs the checkout's node_modules: `npm ci`). FILE is the
# entry; the chunks/ folder beside it is installed with it (the lab bundle beside it is not).
#
# Node.js: the units run /usr/bin/node (the AMI installs Node 24 from NodeSource's apt
# repository, which puts it there). A missing or too old (< 22) ROOT/usr/bin/node is a warning,
# not an error: the image may get Node after the agent.
#
# Idempotent: running it again gives the same tree (files replaced atomically, links
# re-pointed), and never touches an existing config.json.
set -euo pipefail

usage() {
  echo "usage: $0 [--bundle FILE] ROOT   (ROOT: an absolute path to an existing folder, / for this machine)" >&2
  exit 2
}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=""
root=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) [ $# -ge 2 ] || usage; bundle=$2; shift 2 ;;
    --bundle=*) bundle=${1#--bundle=}; shift ;;
    -h|--help) usage ;;
    -*) echo "install.sh: unknown option $1" >&2; usage ;;
    *) [ -z "$root" ] || usage; root=$1; shift ;;
  esac
done

[ -n "$root" ] || usage
case "$root" in
  /*) ;;
  *) echo "install.sh: ROOT must be an absolute path, got '$root'" >&2; exit 2 ;;
esac
if [ ! -d "$root" ]; then
  echo "install.sh: ROOT $root does not exist (or is not a folder)" >&2
  exit 2
fi
root=$(cd "$root" && pwd -P)
# "$root$path" must not double the slash when ROOT is /.
[ "$root" = / ] && root=""

if [ -z "$bundle" ]; then
  bundle="$repo/dist/ebs-cache-agent.mjs"
  if [ ! -f "$bundle" ]; then
    echo "install.sh: $bundle missing: building it (npm run build)"
    (cd "$repo" && npm run build --silent)
  fi
fi
if [ ! -f "$bundle" ]; then
  echo "install.sh: bundle $bundle not found" >&2
  exit 1
fi
chunks="$(dirname "$bundle")/chunks"
if grep -q '"\./chunks/' "$bundle" && [ ! -d "$chunks" ]; then
  echo "install.sh: $bundle loads ./chunks/, but $chunks is missing (npm run build writes both)" >&2
  exit 1
fi

# install_file MODE SOURCE TARGET: copies atomically (temp file + rename), so a reader never
# sees half a file and a second run replaces the file with identical content.
install_file() {
  local mode=$1 source=$2 target=$3
  mkdir -p "${target%/*}"
  local temp
  temp=$(mktemp "${target%/*}/.${target##*/}.XXXXXX")
  cat "$source" >"$temp"
  chmod "$mode" "$temp"
  mv -f "$temp" "$target"
}

# install_files MODE FOLDER SOURCE…: install_file for each SOURCE into FOLDER under its own name,
# with a handful of processes for all of them (five per file made an install of the bundle's
# chunks take seconds): copied into a temp folder beside them, then each renamed into place.
install_files() {
  local mode=$1 folder=$2
  shift 2
  [ $# -gt 0 ] || return 0
  mkdir -p "$folder"
  local stage source
  local names=()
  stage=$(mktemp -d "$folder/.install.XXXXXX")
  cp -- "$@" "$stage/"
  for source in "$@"; do names+=("$stage/${source##*/}"); done
  chmod "$mode" "${names[@]}"
  mv -f -- "${names[@]}" "$folder/"
  rmdir "$stage"
}

# enable UNIT TARGET: the symlink `systemctl enable` makes for WantedBy=TARGET.
enable_unit() {
  local unit=$1 target=$2
  mkdir -p "$root/etc/systemd/system/$target.wants"
  ln -sfn "/etc/systemd/system/$unit" "$root/etc/systemd/system/$target.wants/$unit"
}

# The chunks first, then the entry that names them, then the chunks no entry names any more
# (their names carry a content hash): a run started meanwhile finds every file it imports.
shopt -s nullglob
declare -A wanted=()
if [ -d "$chunks" ]; then
  new_chunks=("$chunks"/*.mjs)
  install_files 0644 "$root/opt/ebs-cache-agent/chunks" "${new_chunks[@]}"
  for chunk in "${new_chunks[@]}"; do wanted[${chunk##*/}]=1; done
fi
install_file 0644 "$bundle" "$root/opt/ebs-cache-agent/ebs-cache-agent.mjs"
for old in "$root"/opt/ebs-cache-agent/chunks/*.mjs; do
  [ -n "${wanted[${old##*/}]:-}" ] || rm -f "$old"
done
shopt -u nullglob
# Node's compile cache (see the units' NODE_COMPILE_CACHE): root's, written by the agent's runs.
mkdir -p "$root/var/cache/ebs-cache-agent"
chmod 0755 "$root/var/cache/ebs-cache-agent"

wrapper=$(mktemp)
trap 'rm -f "$wrapper"' EXIT
cat >"$wrapper" <<'WRAPPER'
#!/bin/sh
# ebs-cache-agent: installed by scripts/install.sh. The units call node directly.
# Node's compile cache, as the units use it: a start without it parses every chunk afresh.
# Where the folder cannot be written (another user, a read-only /var) node runs without it.
export NODE_COMPILE_CACHE="${NODE_COMPILE_CACHE-/var/cache/ebs-cache-agent/node-compile-cache}"
exec /usr/bin/node /opt/ebs-cache-agent/ebs-cache-agent.mjs "$@"
WRAPPER
install_file 0755 "$wrapper" "$root/usr/local/bin/ebs-cache-agent"

config="$root/etc/ebs-cache-agent/config.json"
if [ -e "$config" ] || [ -L "$config" ]; then
  echo "install.sh: keeping the existing $config"
else
  install_file 0644 "$repo/config/config.json" "$config"
fi
install_file 0644 "$repo/config/config.schema.json" "$root/etc/ebs-cache-agent/config.schema.json"

units=()
for unit in ebs-cache-agent.service ebs-cache-agent-ready.service ebs-cache-agent-prewarm.service ebs-cache-agent-release.service ebs-cache-agent-gc.service ebs-cache-agent-gc.timer \
  ebs-cache-agent-keeper.service ebs-cache-agent-keeper.timer ebs-cache-agent-prune.service ebs-cache-agent-prune.timer; do
  units+=("$repo/systemd/$unit")
done
install_files 0644 "$root/etc/systemd/system" "${units[@]}"
enable_unit ebs-cache-agent.service multi-user.target
enable_unit ebs-cache-agent-ready.service multi-user.target
enable_unit ebs-cache-agent-release.service multi-user.target
enable_unit ebs-cache-agent-gc.timer timers.target
enable_unit ebs-cache-agent-prune.timer timers.target

docs=()
for doc in docs/operations.md docs/config.md docs/boot.md docs/labels.md docs/keeper.md iam/ebs-cache-agent-policy.json \
  iam/ebs-cache-keeper-reclaim-policy.json; do
  if [ -f "$repo/$doc" ]; then docs+=("$repo/$doc"); fi
done
install_files 0644 "$root/usr/share/doc/ebs-cache-agent" "${docs[@]}"

# Node.js check: a warning only.
node="$root/usr/bin/node"
if [ ! -x "$node" ]; then
  echo "install.sh: WARNING: $node not found: the units run /usr/bin/node (Node.js >= 22; the AMI installs Node 24)" >&2
else
  if [ -n "$root" ]; then
    version=$(chroot "$root" /usr/bin/node --version 2>/dev/null || "$node" --version 2>/dev/null || true)
  else
    version=$("$node" --version 2>/dev/null || true)
  fi
  major=$(printf '%s' "$version" | sed -nE 's/^v([0-9]+)\..*/\1/p')
  if [ -z "$major" ]; then
    echo "install.sh: WARNING: could not run $node --version: the units need Node.js >= 22 at /usr/bin/node" >&2
  elif [ "$major" -lt 22 ]; then
    echo "install.sh: WARNING: $node is $version: the agent needs Node.js >= 22 (the AMI installs Node 24)" >&2
  fi
fi

echo "install.sh: ebs-cache-agent installed under ${root:-/}"
