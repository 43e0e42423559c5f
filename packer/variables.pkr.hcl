# Variables of both templates (ami.pkr.hcl, pool-volume.pkr.hcl). Set them with -var or a
# *.pkrvars.hcl file, e.g.:
#   packer build -only=amazon-ebs.ami -var region=eu-central-1 packer/
#   packer build -only=amazon-ebsvolume.pool -var-file=pool.pkrvars.hcl packer/
# See docs/operations.md.

# --- both templates -------------------------------------------------------------------------

# The agent's package, made from this checkout by both builds (npm run build + tar into dist/,
# git-ignored) and uploaded to their builder: the bundle (its entry and chunks; not the lab), its
# units, default config, install.sh, the docs and the IAM policy.
locals {
  repo          = abspath("${path.root}/..")
  agent_package = "${local.repo}/dist/ebs-cache-agent-package.tar.gz"
  package_agent = [
    "set -eu",
    "mkdir -p '${local.repo}/dist'",
    "cd '${local.repo}'",
    "npm run build:agent --silent",
    "tar -czf '${local.agent_package}' dist/ebs-cache-agent.mjs dist/chunks systemd config scripts/install.sh docs iam",
  ]
}

variable "region" {
  type        = string
  default     = "us-east-1"
  description = "AWS region the AMI, the pool volume and its snapshot are made in."
}

variable "subnet_id" {
  type        = string
  default     = ""
  description = "Subnet of the builder instance (empty: the default VPC). Its Availability Zone is the pool volume's."
}

variable "source_ami_name" {
  type        = string
  default     = "debian-13-amd64-*"
  description = "Name filter of the base AMI (the newest match is used). Debian 13's docker.io is 26.1 (docs/operations.md, Engines tested); Debian 12's was 20.10, long out of support."
}

variable "source_ami_owners" {
  type        = list(string)
  default     = ["136693071363"]
  description = "Owners of the base AMI (136693071363: Debian's official AWS account)."
}

variable "ssh_username" {
  type        = string
  default     = "admin"
  description = "Login user of the base AMI (admin on Debian, ubuntu on Ubuntu)."
}

variable "docker_package" {
  type        = string
  default     = "docker.io"
  description = "apt package providing dockerd. The pool volume must be built with the docker the cluster runs (same package, same storage driver)."
}

# --- ami.pkr.hcl ----------------------------------------------------------------------------

variable "ami_name_prefix" {
  type        = string
  default     = "ebs-cache-agent"
  description = "AMI name prefix; a UTC timestamp is appended."
}

variable "ami_instance_type" {
  type    = string
  default = "t3.medium"
}

variable "root_volume_size_gib" {
  type        = number
  default     = 20
  description = "Root volume of the AMI (docker's default data-root lives there when the node is degraded)."
}

variable "node_major" {
  type        = number
  default     = 24
  description = "Node.js major version installed from NodeSource's apt repository (to /usr/bin/node, where the units expect it); the agent needs >= 22."
  validation {
    condition     = var.node_major >= 22
    error_message = "The agent needs Node.js 22 or newer."
  }
}

variable "agent_pool" {
  type        = string
  default     = "default"
  description = "`pool` in the AMI's /etc/ebs-cache-agent/config.json (the instance tag ebs-cache:pool overrides it per instance)."
}

variable "agent_image_set" {
  type        = string
  default     = ""
  description = "`imageSet` in the AMI's config.json; empty accepts pool volumes of any image set."
}

# --- pool-volume.pkr.hcl --------------------------------------------------------------------

variable "pool" {
  type        = string
  default     = "default"
  description = "Pool the volume and snapshot are made for (tag ebs-cache:pool)."
}

variable "image_set" {
  type        = string
  default     = "default-1"
  description = "Name of this image set (tag ebs-cache:image-set); change it whenever `images` changes."
}

variable "images" {
  type        = list(string)
  default     = []
  description = "Image references pulled into the volume's data-root (tag ebs-cache:images, checked by the agent after boot)."
  validation {
    condition     = length(join(",", var.images)) <= 256
    error_message = "The images list is written to the tag ebs-cache:images, whose value is at most 256 characters."
  }
}

variable "image_store" {
  type        = string
  default     = "graphdriver"
  description = "Image store the pool volume is built with (tag ebs-cache:image-store): graphdriver (overlay2 in <volume>/docker), or containerd (features.containerd-snapshotter, containerd's root in <volume>/containerd). Use the store the cluster's hosts run."
  validation {
    condition     = contains(["graphdriver", "containerd"], var.image_store)
    error_message = "The image_store is graphdriver or containerd."
  }
}

variable "pool_volume_size_gib" {
  type        = number
  default     = 50
  description = "Size of the pool volume (and snapshot); volumes the agent creates from the snapshot are at least this large."
}

variable "pool_volume_type" {
  type    = string
  default = "gp3"
}

variable "pool_volume_encrypted" {
  type        = bool
  default     = false
  description = "Encrypt the pool volume, and so its snapshot and every volume made from it (config volumes.encrypted of the agent)."
}

variable "pool_volume_kms_key_id" {
  type        = string
  default     = ""
  description = "The KMS key (id, alias/NAME or ARN) of the encrypted pool volume; empty: the account's default key for EBS. Needs pool_volume_encrypted."
}

variable "pool_volume_tags" {
  type        = map(string)
  default     = {}
  description = "The operator's tags (cost allocation, ownership) on the pool volume and its snapshot, as the agent's config volumes.tags puts them on the volumes it creates; keys outside ebs-cache: and aws:."
}

variable "pool_builder_instance_type" {
  type        = string
  default     = "t3.large"
  description = "Builder of the pool volume: extraction is CPU- and network-bound."
}

variable "docker_config_json" {
  type        = string
  default     = ""
  sensitive   = true
  description = "Optional ~/.docker/config.json (registry credentials) used for the pulls, removed from the builder afterwards."
}
