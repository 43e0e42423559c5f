#!/usr/bin/env bash
# Runs (as root) on the builder instance of packer/pool-volume.pkr.hcl: formats the extra EBS
# volume XFS (label ebs-cache, ftype=1), runs dockerd with its data-root on <volume>/docker
# (and, for the containerd image store, containerd with its root on <volume>/containerd),
# pulls the image set, records what each image reads at start (either store),
# stops docker, removes the machine-local state and unmounts. The same
# steps as the lab's golden snapshot (src/lab/volumes/golden.ts). Writes ENGINE_VERSION to $BUILT_FILE
# for the template to download (the snapshot step tags it). Environment (set by the template):
#   DOCKER_PACKAGE  POOL_VOLUME_SIZE_GIB  IMAGES (space-separated)  DOCKER_CONFIG_JSON (optional)
#   IMAGE_STORE (graphdriver | containerd)  AGENT_PACKAGE (the agent's package, uploaded; Node.js
#   installed by scripts/node.sh)  POOL_VOLUME_DEVICE (optional: the blank disk to format, checked
#   as the one looked for is; the template sets none, the lab gives its loop device)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

: "${DOCKER_PACKAGE:?}" "${POOL_VOLUME_SIZE_GIB:?}"
IMAGES=${IMAGES:-}
[ -n "$IMAGES" ] || { echo "pool-volume: no images to pull (set the variable images)" >&2; exit 1; }
DOCKER_CONFIG_JSON=${DOCKER_CONFIG_JSON:-}
IMAGE_STORE=${IMAGE_STORE:-graphdriver}
AGENT_PACKAGE=${AGENT_PACKAGE:-}
POOL_VOLUME_DEVICE=${POOL_VOLUME_DEVICE:-}
case "$IMAGE_STORE" in graphdriver | containerd) ;; *) echo "pool-volume: IMAGE_STORE is graphdriver or containerd, not $IMAGE_STORE" >&2; exit 1 ;; esac
BUILT_FILE=/var/tmp/ebs-cache-pool-volume.env
MOUNT=/mnt/ebs-cache
LABEL=ebs-cache            # src/layout.ts FS_LABEL
DATA_ROOT="$MOUNT/docker"  # src/layout.ts DATA_ROOT_SUBDIR
# The containerd store: containerd's root on the volume (src/docker/containerd-store.ts).
CONTAINERD_ROOT="$MOUNT/containerd"
CONTAINERD_CONFIG=/etc/containerd/config.toml

if command -v cloud-init >/dev/null 2>&1; then cloud-init status --wait >/dev/null || true; fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends xfsprogs util-linux "$DOCKER_PACKAGE"
systemctl stop docker.service docker.socket || true

# The extra volume: the one disk of the wanted size with no partition, no mount and no
# signature. It shows up some time after the instance starts: wait for it.
want=$((POOL_VOLUME_SIZE_GIB * 1024 * 1024 * 1024))
blank() { # $1: a device of the wanted size, with no partition, no mount and no signature
  [ "$(lsblk -dnbo SIZE "$1" | tr -d ' ')" = "$want" ] || return 1
  [ "$(lsblk -nro NAME "$1" | wc -l)" = 1 ] || return 1   # has partitions
  ! findmnt -rn -S "$1" >/dev/null || return 1             # mounted
  ! blkid -p "$1" >/dev/null 2>&1                          # carries a signature
}
device=""
if [ -n "$POOL_VOLUME_DEVICE" ]; then
  blank "$POOL_VOLUME_DEVICE" || { echo "pool-volume: $POOL_VOLUME_DEVICE is not a blank ${POOL_VOLUME_SIZE_GIB} GiB disk" >&2; exit 1; }
  device=$POOL_VOLUME_DEVICE
fi
for _ in $(seq 1 120); do
  [ -z "$device" ] || break
  candidates=()
  while read -r name type; do
    if [ "$type" = disk ] && blank "$name"; then candidates+=("$name"); fi
  done < <(lsblk -dpno NAME,TYPE)
  if [ ${#candidates[@]} -eq 1 ]; then device=${candidates[0]}; break; fi
  if [ ${#candidates[@]} -gt 1 ]; then echo "pool-volume: several blank ${POOL_VOLUME_SIZE_GIB} GiB disks: ${candidates[*]}" >&2; exit 1; fi
  sleep 1
done
[ -n "$device" ] || { echo "pool-volume: no blank ${POOL_VOLUME_SIZE_GIB} GiB disk appeared" >&2; lsblk >&2; exit 1; }
echo "pool-volume: formatting $device"

mkfs.xfs -q -L "$LABEL" -m crc=1 -n ftype=1 "$device"
mkdir -p "$MOUNT"
mount -o noatime "$device" "$MOUNT"
mkdir -p "$DATA_ROOT"

# dockerd on the volume, with the image store asked for: docker 29+ defaults to the containerd
# store, older ones to graphdriver, so the feature is always written out.
mkdir -p /etc/docker
if [ -f /etc/docker/daemon.json ]; then cp /etc/docker/daemon.json /etc/docker/daemon.json.pool-volume.bak; fi
snapshotter=false
[ "$IMAGE_STORE" = containerd ] && snapshotter=true
printf '{\n  "data-root": "%s",\n  "features": { "containerd-snapshotter": %s }\n}\n' "$DATA_ROOT" "$snapshotter" >/etc/docker/daemon.json
# With the containerd store, Debian's dockerd keeps images in the system containerd's root
# (docs/operations.md, Engines tested): that root goes on the volume.
if [ "$IMAGE_STORE" = containerd ]; then
  mkdir -p /etc/containerd "$CONTAINERD_ROOT"
  if [ -f "$CONTAINERD_CONFIG" ]; then cp "$CONTAINERD_CONFIG" "$CONTAINERD_CONFIG.pool-volume.bak"; fi
  systemctl stop containerd.service || true
  # The top-level root replaced (TOML keys of a table are unordered; a second root would be refused).
  { if [ -f "$CONTAINERD_CONFIG.pool-volume.bak" ]; then cat "$CONTAINERD_CONFIG.pool-volume.bak"; fi; } |
    awk -v root="$CONTAINERD_ROOT" 'BEGIN { print "root = \"" root "\"" } /^[[:space:]]*\[/ { table = 1 } !table && /^[[:space:]]*root[[:space:]]*=/ { next } { print }' \
      >"$CONTAINERD_CONFIG.new"
  mv "$CONTAINERD_CONFIG.new" "$CONTAINERD_CONFIG"
  systemctl start containerd.service
fi

cleanup() {
  rm -rf /root/.docker/config.json
  systemctl stop docker.service docker.socket || true
  if [ -f /etc/docker/daemon.json.pool-volume.bak ]; then mv /etc/docker/daemon.json.pool-volume.bak /etc/docker/daemon.json; else rm -f /etc/docker/daemon.json; fi
  if [ "$IMAGE_STORE" = containerd ]; then
    systemctl stop containerd.service || true
    if [ -f "$CONTAINERD_CONFIG.pool-volume.bak" ]; then mv "$CONTAINERD_CONFIG.pool-volume.bak" "$CONTAINERD_CONFIG"; else rm -f "$CONTAINERD_CONFIG"; fi
  fi
  if findmnt -rn "$MOUNT" >/dev/null; then sync; umount "$MOUNT"; fi
  if [ "$IMAGE_STORE" = containerd ]; then systemctl start containerd.service || true; fi
}
trap cleanup EXIT

if [ -n "$DOCKER_CONFIG_JSON" ]; then
  install -d -m 0700 /root/.docker
  (umask 077; printf '%s' "$DOCKER_CONFIG_JSON" >/root/.docker/config.json)
fi
systemctl start docker.service
root_dir=$(docker info --format '{{.DockerRootDir}}')
[ "$root_dir" = "$DATA_ROOT" ] || { echo "pool-volume: docker runs on $root_dir, not $DATA_ROOT" >&2; exit 1; }
# The store dockerd really uses (src/docker/engine.ts detectImageStore): a snapshotter reports
# driver-type io.containerd.snapshotter.v1.
store=graphdriver
docker info --format '{{json .DriverStatus}}' | grep -q 'io.containerd.snapshotter.v1' && store=containerd
[ "$store" = "$IMAGE_STORE" ] || { echo "pool-volume: docker uses the $store image store, not $IMAGE_STORE" >&2; exit 1; }
printf 'ENGINE_VERSION=%s\n' "$(docker version --format '{{.Server.Version}}')" >"$BUILT_FILE"
for image in $IMAGES; do
  echo "pool-volume: pulling $image"
  docker pull --quiet "$image"
done
docker image ls
# The need list (docs/prewarm.md): what each image reads at start, recorded with dockerd still
# running, by the agent's own builder step: the builder's agent when its source AMI has one (made
# by packer/ami.pkr.hcl), else the package the template uploaded, run by the Node.js it installed.
# With the containerd store the images' layers are containerd's snapshots on the volume: the step
# asks the system containerd (its socket, dockerd's namespace moby) through ctr.
record=(ebs-cache-agent)
if ! command -v ebs-cache-agent >/dev/null; then
  if [ ! -f "$AGENT_PACKAGE" ]; then
    echo "pool-volume: no ebs-cache-agent and no AGENT_PACKAGE to record the need list" >&2
    exit 1
  fi
  agent_dir=$(mktemp -d)
  tar -xzf "$AGENT_PACKAGE" -C "$agent_dir"
  record=(/usr/bin/node "$agent_dir/dist/ebs-cache-agent.mjs")
fi
apt-get install -y -qq --no-install-recommends strace
# shellcheck disable=SC2086 # IMAGES is space-separated on purpose
"${record[@]}" record-reads --volume "$MOUNT" --containerd-address /run/containerd/containerd.sock $IMAGES
[ -z "${agent_dir:-}" ] || rm -rf "$agent_dir"
systemctl stop docker.service docker.socket
if [ "$IMAGE_STORE" = containerd ]; then systemctl stop containerd.service; fi

# State that must not travel between machines: the agent's own list, the one `snapshot build`
# strips its image by (src/docker/built-volume-strip.ts), run by the builder's agent or else the
# agent's package the template uploaded (AGENT_PACKAGE, run by /usr/bin/node).
agent() {
  if command -v ebs-cache-agent >/dev/null; then
    ebs-cache-agent "$@"
    return
  fi
  if [ ! -f "${AGENT_PACKAGE:-}" ]; then
    echo "pool-volume: no ebs-cache-agent and no AGENT_PACKAGE to strip the machine-local state" >&2
    return 1
  fi
  local dir rc=0
  dir=$(mktemp -d)
  tar -xzf "$AGENT_PACKAGE" -C "$dir"
  /usr/bin/node "$dir/dist/ebs-cache-agent.mjs" "$@" || rc=$?
  rm -rf "$dir"
  return "$rc"
}
agent snapshot strip --volume "$MOUNT" --image-store "$IMAGE_STORE"
sync
umount "$MOUNT"
echo "pool-volume: $device holds the image set; unmounted"
