#!/usr/bin/env bash
# Prepares a fresh Debian 12 / Ubuntu machine (as root) to build, test and run the lab:
# the Debian packages the lab and tests use, a check that the machine's Python has moto, then
# the npm dependencies (which bring Node 24 through the `node` package, so the system's Node
# version does not matter). Idempotent:
# apt runs only when a package is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "scripts/setup.sh: run as root (the lab uses loop devices, mount and a private dockerd)" >&2
  exit 1
fi

packages=(
  docker.io        # the lab's private dockerd and the docker CLI
  fio              # pre-warm verdicts
  strace           # the golden build records what each image reads at start (src/host/record-reads.ts)
  python3-pyfuse3  # the lab's cold snapshots (a FUSE layer under the loop devices)
  fuse3            # fusermount, for that layer
  xfsprogs         # mkfs.xfs, xfs_growfs, xfs_admin
  e2fsprogs        # the foreign filesystems tests use
  btrfs-progs      # the foreign-volume corpus (test/agent/boot/foreign.lab.test.ts): btrfs
  dosfstools       #   vfat
  fdisk            #   sfdisk: GPT and MBR partition tables
  lvm2             #   pvcreate: an LVM physical volume (no volume group: nothing activates)
  cryptsetup-bin   #   a LUKS header (never opened)
  mdadm            #   mdadm --examine checks the md RAID superblocks the test writes
  util-linux       # losetup, blkid, wipefs, findmnt, mount
  awscli           # the real aws CLI, driven against the EC2 emulator
  busybox-static   # the userland of the lab's locally built images
  docker-registry  # a local registry: the pull baseline in bench/, the refresh lab test
  systemd-container # systemd-nspawn boot test
  debootstrap      # the rootfs of the systemd boot test
  packer           # packer validate of the templates
  shellcheck       # every shell script of the repository is checked (test/scripts/shellcheck.test.ts, test/scripts/check-iam.test.ts)
  ca-certificates
  curl
)
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
# python3's jsonschema validates documents against the shipped JSON Schemas next to ajv
# (test/config/schema-oracle.test.ts). The python3 on PATH may be another interpreter (pyenv) that has
# it already; if not, Debian's package gives it to /usr/bin/python3, which the test tries next.
python3 -c 'import jsonschema' >/dev/null 2>&1 || /usr/bin/python3 -c 'import jsonschema' >/dev/null 2>&1 || packages+=(python3-jsonschema)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # policy-rc.d keeps the packages' own services (the host's docker, the registry) from
  # starting: the lab runs private instances of them and never uses the host's.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# moto's EC2 server (test/lab/ec2/moto-twice.test.ts runs the agent's EC2 paths against it and the lab's
# emulator): it comes with the machine image's Python (pyenv), not from Debian, and no Python
# package index is reachable from here to install it. scripts/moto-server.sh finds it even where
# PATH lacks pyenv's shims; without it the test would fail, so setup says so now.
if ! moto=$(bash scripts/moto-server.sh --check); then
  echo "scripts/setup.sh: moto is missing: test/lab/ec2/moto-twice.test.ts needs it (pip install 'moto[server]' into the machine's python3)" >&2
  exit 1
fi
echo "setup: $moto"

# Loop devices: make sure the control node exists (minimal containers may lack it).
[ -e /dev/loop-control ] || modprobe loop 2>/dev/null || true

if [ ! -x node_modules/.bin/node ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  # --prefer-offline: what the npm cache holds is used without asking the registry whether it is stale
  # (the lock names exact versions and integrity hashes); what it lacks is fetched as usual.
  npm ci --no-audit --no-fund --prefer-offline
fi
echo "setup: ready (node $(node_modules/.bin/node --version))"
