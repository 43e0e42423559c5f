#!/usr/bin/env bash
# Runs (as root) on a builder instance of packer/ (the AMI's and the pool volume's): Node.js
# NODE_MAJOR from NodeSource's apt repository at /usr/bin/node, the path the agent's units and
# wrapper run, updated by apt with the rest of the system. Environment: NODE_MAJOR.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

: "${NODE_MAJOR:?}"

# cloud-init may still be configuring apt on first boot.
if command -v cloud-init >/dev/null 2>&1; then cloud-init status --wait >/dev/null || true; fi

apt-get update -qq
apt-get install -y -qq --no-install-recommends ca-certificates curl gnupg
install -d -m 0755 /usr/share/keyrings
curl -fsSL https://deb.nodesource.com/gpgkey/nodesource-repo.gpg.key |
  gpg --batch --yes --dearmor -o /usr/share/keyrings/nodesource.gpg
repo="https://deb.nodesource.com/node_${NODE_MAJOR}.x"
echo "deb [signed-by=/usr/share/keyrings/nodesource.gpg] $repo nodistro main" >/etc/apt/sources.list.d/nodesource.list
apt-get update -qq
apt-get install -y -qq nodejs
node_version=$(/usr/bin/node --version)
case "$node_version" in
  v"$NODE_MAJOR".*) echo "node: Node.js $node_version at /usr/bin/node" ;;
  *) echo "node: expected Node.js $NODE_MAJOR at /usr/bin/node, found $node_version" >&2; exit 1 ;;
esac
