#!/usr/bin/env bash
# Runs (as root) on the AMI builder instance of packer/ami.pkr.hcl, after scripts/node.sh:
# docker, fio, xfsprogs, nvme-cli, then the agent from the uploaded package via
# scripts/install.sh, with the AMI's config.json. Environment (set by the template):
#   DOCKER_PACKAGE  AGENT_PACKAGE  AGENT_POOL  AGENT_IMAGE_SET
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

: "${DOCKER_PACKAGE:?}" "${AGENT_PACKAGE:?}" "${AGENT_POOL:?}"
AGENT_IMAGE_SET=${AGENT_IMAGE_SET:-}

# cloud-init may still be configuring apt on first boot.
if command -v cloud-init >/dev/null 2>&1; then cloud-init status --wait >/dev/null || true; fi

apt-get update -qq
apt-get install -y -qq --no-install-recommends ca-certificates curl gnupg fio xfsprogs nvme-cli util-linux procps "$DOCKER_PACKAGE"

# The agent.
work=$(mktemp -d)
tar -xzf "$AGENT_PACKAGE" -C "$work"
bash "$work/scripts/install.sh" --bundle "$work/dist/ebs-cache-agent.mjs" /
# The AMI's configuration (install.sh only ships the default when none exists).
AGENT_POOL="$AGENT_POOL" AGENT_IMAGE_SET="$AGENT_IMAGE_SET" /usr/bin/node -e '
  const fs = require("node:fs");
  const path = "/etc/ebs-cache-agent/config.json";
  const config = JSON.parse(fs.readFileSync(path, "utf8"));
  config.pool = process.env.AGENT_POOL;
  config.imageSet = process.env.AGENT_IMAGE_SET === "" ? null : process.env.AGENT_IMAGE_SET;
  fs.writeFileSync(path, JSON.stringify(config, null, 2) + "\n");
'
ebs-cache-agent --help >/dev/null
# Node's compile cache (NODE_COMPILE_CACHE in the units and the wrapper): each command's --help
# loads that command's code without running it, so the first boot of every instance starts from
# compiled code instead of parsing the bundle. Nothing here talks to EC2 or docker.
for command in boot release prewarm status gc pool doctor; do
  ebs-cache-agent "$command" --help >/dev/null
done
echo "ami-setup: compile cache warmed: $(du -sh /var/cache/ebs-cache-agent | cut -f1)"
rm -rf "$work" "$AGENT_PACKAGE"

# docker starts at boot, after ebs-cache-agent.service (its units are enabled by install.sh).
systemctl enable docker.service
# The package's postinst started docker once: an AMI must not carry an engine identity or a
# data-root of its own (every instance would share them).
systemctl stop docker.service docker.socket || true
rm -rf /var/lib/docker /etc/docker/key.json
# The agent's own state starts empty on every instance.
rm -rf /var/lib/ebs-cache-agent /var/lib/ebs-cache

apt-get clean
echo "ami-setup: done"
