# The amazon plugin, for Packer >= 1.7 (`packer init packer/` fetches it). Packer 1.6.6, which
# the project's CI uses to validate the templates offline, has the amazon builders built in and
# does not know `required_plugins`: CI validates a copy of this folder without this file
# (test/packer/packer.test.ts). Keep this file free of anything else.
packer {
  required_version = ">= 1.7.0"
  required_plugins {
    amazon = {
      source  = "github.com/hashicorp/amazon"
      version = ">= 1.2.0"
    }
  }
}
