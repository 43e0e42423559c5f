# The cluster's AMI: Debian 13 with Node.js (NodeSource, /usr/bin/node), docker, fio, xfsprogs
# and ebs-cache-agent installed by scripts/install.sh, its units enabled:
#   ebs-cache-agent.service          boot --no-docker, Before=docker.service
#   ebs-cache-agent-ready.service    boot --no-claim (verify docker, readiness labels), After=docker.service
#   ebs-cache-agent-release.service  release at shutdown (ExecStop=), after docker.service has stopped
#   ebs-cache-agent-gc.timer         gc, hourly
#   ebs-cache-agent-prune.timer      prune the pool volume every hour of uptime
#
# An AMI that already runs docker on a disk of its own (osparc's mounts the largest disk at
# /mnt/docker): keep that script, as a unit ordered Before=ebs-cache-agent.service docker.service,
# pointing docker there through daemon.json's "data-root" (not a --data-root flag). The agent
# records that data-root at its first switch and puts it back at release and on a degraded boot.
# Make the script choose instance-store disks (nvme-Amazon_EC2_NVMe_Instance_Storage_*) or the
# AMI's own data disk by name, never "the largest disk" blindly: on a reboot or a warm buffer's
# start the agent's cache volume is attached already and may be the largest (docs/osparc.md).
#
#   packer build -only=amazon-ebs.ami packer/            (Packer >= 1.7: packer init packer/ first)
#
# The agent is packaged from this checkout by a local step (npm run build + tar into dist/),
# so the machine running Packer needs the checkout's node_modules (npm ci).
#
# What the instances launched from this AMI need (set where they are launched, not here; the
# builder instance itself runs no agent). osparc's autoscaler uses no launch template: its
# RunInstances passes the instance profile and no metadata options (docs/osparc-deploy.md):
# - an IAM instance profile whose role has iam/ebs-cache-agent-policy.json (osparc:
#   EC2_INSTANCES_ATTACHED_IAM_PROFILE);
# - IMDSv2 with a hop limit of 1, and optionally instance metadata tags: under osparc from the
#   account's defaults,
#     aws ec2 modify-instance-metadata-defaults --http-tokens required --http-put-response-hop-limit 1
#   (a launcher that takes options passes HttpTokens=required, HttpPutResponseHopLimit=1,
#   InstanceMetadataTags=enabled itself). Without metadata tags the agent reads them from the
#   DescribeInstances call it makes anyway.
# With the amazon plugin (Packer >= 1.7) the builder can get the same options:
#     metadata_options { http_endpoint = "enabled" http_tokens = "required" instance_metadata_tags = "enabled" }
# Packer 1.6.6 (used to validate these templates offline) does not know the block, so it is
# left out here.

locals {
  # UTC, ISO-8601 basic (20250520T101500): AMI names allow no ":".
  build_stamp = formatdate("YYYYMMDD'T'hhmmss", timestamp())
}

source "amazon-ebs" "ami" {
  region          = var.region
  subnet_id       = var.subnet_id
  instance_type   = var.ami_instance_type
  ami_name        = "${var.ami_name_prefix}-${local.build_stamp}"
  ami_description = "Docker Swarm node with ebs-cache-agent (Node.js ${var.node_major}, ${var.docker_package})"

  source_ami_filter {
    filters = {
      name                = var.source_ami_name
      architecture        = "x86_64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = var.source_ami_owners
    most_recent = true
  }
  ssh_username = var.ssh_username

  launch_block_device_mappings {
    device_name           = "/dev/xvda"
    volume_size           = var.root_volume_size_gib
    volume_type           = "gp3"
    throughput            = 125
    iops                  = 3000
    delete_on_termination = true
  }

  tags = {
    Name                   = "${var.ami_name_prefix}-${local.build_stamp}"
    "ebs-cache:agent"      = "installed"
    "ebs-cache:node-major" = "${var.node_major}"
  }
}

build {
  name    = "ami"
  sources = ["source.amazon-ebs.ami"]

  # Package the agent from this checkout (variables.pkr.hcl).
  provisioner "shell-local" {
    inline = local.package_agent
  }

  provisioner "file" {
    source      = local.agent_package
    destination = "/tmp/ebs-cache-agent-package.tar.gz"
    # Made by the step above, after validation.
    generated = true
  }

  provisioner "shell" {
    script           = "${path.root}/scripts/node.sh"
    execute_command  = "chmod +x '{{ .Path }}'; sudo -E bash '{{ .Path }}'"
    environment_vars = ["NODE_MAJOR=${var.node_major}"]
  }

  provisioner "shell" {
    script          = "${path.root}/scripts/ami-setup.sh"
    execute_command = "chmod +x '{{ .Path }}'; sudo -E bash '{{ .Path }}'"
    environment_vars = [
      "DOCKER_PACKAGE=${var.docker_package}",
      "AGENT_PACKAGE=/tmp/ebs-cache-agent-package.tar.gz",
      "AGENT_POOL=${var.agent_pool}",
      "AGENT_IMAGE_SET=${var.agent_image_set}",
    ]
  }

  # The host's part of `ebs-cache-agent doctor` (no credentials: the builder's role is not the
  # agent's): the image fails to build when it lacks what a boot needs (fio, xfsprogs, blkid,
  # docker, the units installed, enabled and ordered, a daemon.json the switch accepts, a valid
  # config). Its cloud part runs on a fresh instance of the AMI (docs/operations.md).
  provisioner "shell" {
    inline = ["sudo ebs-cache-agent doctor --host-only"]
  }
}
