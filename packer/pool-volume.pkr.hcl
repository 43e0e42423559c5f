# A pool volume and its snapshot: an extra EBS volume formatted XFS (label ebs-cache, ftype=1 for
# overlay2) whose docker data-root (<volume>/docker) holds the image set, pulled and extracted,
# without the builder's machine-local state (swarm/, containers/, engine-id, dockerd's build cache
# and scratch...: `ebs-cache-agent snapshot strip`, the list `snapshot build` strips by). What the
# lab's golden snapshot (src/lab/volumes/golden.ts) is, made in AWS:
#
#   packer build -only=amazon-ebsvolume.pool -var pool=sim4life -var image_set=2025-05 \
#     -var 'images=["registry.example.org/simcore/services/dynamic/sim4life:3.1.0"]' packer/
#
# The volume stays (delete_on_termination = false): it is the pool's first volume, available in
# the builder's Availability Zone. A local post-processing step then snapshots it, copying the
# volume's tags (needs the aws CLI and the same credentials as Packer); the agent creates
# volumes from the pool's newest snapshot in any zone. Tags (src/tags.ts):
#   ebs-cache:managed=true  ebs-cache:kind=pool  ebs-cache:pool=<pool>
#   ebs-cache:image-set=<image_set>  ebs-cache:images=<images, comma-separated>
#   ebs-cache:image-store=<image_store>  ebs-cache:engine-version=<the builder's docker version>
#   ebs-cache:built-at=<this build's start, UTC, RFC 3339>
# The builder also records what each image reads at start into the volume's need list
# (.ebs-cache-agent/reads.json, docs/prewarm.md), on either store: the template
# packages the agent from this checkout (as packer/ami.pkr.hcl does), uploads it with Node.js
# (scripts/node.sh), and scripts/pool-volume.sh runs, after the pulls and with dockerd still up,
# `ebs-cache-agent record-reads --volume /mnt/ebs-cache <images>` (the builder's own agent when
# its source AMI has one, else the uploaded one).
# Image set and built-at are the snapshot's generation (docs/boot.md, "Generations"): every build
# makes a new one, which boots prefer, the keeper stocks and gc retires the older ones for.
# (the engine version is known on the builder only: it writes it to a file this template
# downloads, and the snapshot step tags the volume with it before snapshotting).
# pool_volume_encrypted / pool_volume_kms_key_id encrypt the volume (its snapshot and the volumes
# made from it are then encrypted with that key), pool_volume_tags adds the operator's tags to the
# volume and, through the snapshot step, to the snapshot.
# Build it with the docker the cluster runs (var.docker_package) and the store its hosts use
# (var.image_store): the agent leaves a volume whose store does not match the host's. With the amazon plugin (Packer >= 1.7) `snapshot_volume = true` and `snapshot_tags`
# could replace the post-processing step; Packer 1.6.6 (the offline validation) knows neither.

locals {
  # timestamp() is RFC 3339 in UTC (2026-12-01T10:00:00Z), what ebs-cache:built-at holds.
  pool_built_at = timestamp()
  pool_tags = {
    "ebs-cache:managed"     = "true"
    "ebs-cache:kind"        = "pool"
    "ebs-cache:pool"        = var.pool
    "ebs-cache:image-set"   = var.image_set
    "ebs-cache:images"      = join(",", var.images)
    "ebs-cache:image-store" = var.image_store
    "ebs-cache:built-at"    = local.pool_built_at
  }
  pool_stamp = formatdate("YYYYMMDD'T'hhmmss", local.pool_built_at)
  # The checkout's dist/ (git-ignored) keeps the manifest.
  pool_dist     = "${local.repo}/dist"
  pool_manifest = "${local.pool_dist}/pool-volume-manifest-${local.pool_stamp}.json"
  # What the builder's docker was (ENGINE_VERSION=…), downloaded for the snapshot step.
  pool_built = "${local.pool_dist}/pool-volume-built-${local.pool_stamp}.env"
}

source "amazon-ebsvolume" "pool" {
  region        = var.region
  subnet_id     = var.subnet_id
  instance_type = var.pool_builder_instance_type

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

  ebs_volumes {
    device_name           = "/dev/sdf"
    volume_type           = var.pool_volume_type
    volume_size           = var.pool_volume_size_gib
    throughput            = 125
    iops                  = 3000
    encrypted             = var.pool_volume_encrypted
    kms_key_id            = var.pool_volume_kms_key_id
    delete_on_termination = false
    # The operator's tags first: the pool's own ebs-cache: tags win. The snapshot step copies them all.
    tags = merge(var.pool_volume_tags, local.pool_tags, {
      Name = "ebs-cache pool ${var.pool} (${var.image_set})"
    })
  }

  run_tags = {
    Name = "ebs-cache pool-volume builder (${var.pool})"
  }
}

build {
  name    = "pool-volume"
  sources = ["source.amazon-ebsvolume.pool"]

  # The agent's package (variables.pkr.hcl): the builder records the need list with it
  # (`ebs-cache-agent record-reads`), whatever its source AMI holds.
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
    script          = "${path.root}/scripts/pool-volume.sh"
    execute_command = "chmod +x '{{ .Path }}'; sudo -E bash '{{ .Path }}'"
    environment_vars = [
      "DOCKER_PACKAGE=${var.docker_package}",
      "POOL_VOLUME_SIZE_GIB=${var.pool_volume_size_gib}",
      "IMAGES=${join(" ", var.images)}",
      "DOCKER_CONFIG_JSON=${var.docker_config_json}",
      "IMAGE_STORE=${var.image_store}",
      "AGENT_PACKAGE=/tmp/ebs-cache-agent-package.tar.gz",
    ]
  }

  provisioner "file" {
    direction   = "download"
    source      = "/var/tmp/ebs-cache-pool-volume.env"
    destination = local.pool_built
  }

  # One chain: the manifest records the volume id, the local step snapshots that volume.
  post-processors {
    post-processor "manifest" {
      output     = local.pool_manifest
      strip_path = true
    }
    post-processor "shell-local" {
      environment_vars = [
        "MANIFEST=${local.pool_manifest}",
        "BUILT=${local.pool_built}",
      ]
      script = "${path.root}/scripts/snapshot-pool-volume.sh"
    }
  }
}
