#!/usr/bin/env bash
# Runs locally (packer's shell-local post-processor of packer/pool-volume.pkr.hcl): snapshots
# the pool volume the build left, with the volume's tags (ebs-cache:managed, kind, pool,
# image-set, images, image-store, built-at: the generation), and waits until the snapshot is
# completed. First it tags the volume ebs-cache:engine-version with the builder's docker version
# (BUILT, downloaded from the builder: ENGINE_VERSION=…). Needs the aws CLI with the credentials
# Packer used. MANIFEST: the manifest post-processor's file for this build. EC2_ENDPOINT_URL
# (optional): another EC2 endpoint (a VPC endpoint; the lab's emulator in
# test/packer/snapshot.test.ts).
set -euo pipefail
: "${MANIFEST:?}" "${BUILT:?}"
endpoint=()
[ -z "${EC2_ENDPOINT_URL:-}" ] || endpoint=(--endpoint-url "$EC2_ENDPOINT_URL")

engine_version=$(sed -nE 's/^ENGINE_VERSION=([^[:space:]]+)$/\1/p' "$BUILT" | tail -n 1)
[ -n "$engine_version" ] || { echo "snapshot-pool-volume: no ENGINE_VERSION in $BUILT" >&2; exit 1; }

# amazon-ebsvolume's artifact id: "<region>:<volume id>[,<region>:<volume id>…]".
artifact=$(sed -nE 's/.*"artifact_id": *"([^"]*)".*/\1/p' "$MANIFEST" | tail -n 1)
[ -n "$artifact" ] || { echo "snapshot-pool-volume: no artifact_id in $MANIFEST" >&2; exit 1; }

IFS=, read -r -a parts <<<"$artifact"
for part in "${parts[@]}"; do
  region=${part%%:*}
  volume=${part#*:}
  aws ec2 "${endpoint[@]}" create-tags --region "$region" --resources "$volume" --tags "Key=ebs-cache:engine-version,Value=$engine_version"
  # The backquotes are a JMESPath literal for the aws CLI, not a command substitution.
  # shellcheck disable=SC2016
  tags=$(aws ec2 "${endpoint[@]}" describe-volumes --region "$region" --volume-ids "$volume" \
    --query 'Volumes[0].Tags[?!starts_with(Key, `aws:`)]' --output json)
  # The generation travels with the tags: a volume without its build time (an older template)
  # would make a snapshot that boots rank below every built one.
  grep -q '"ebs-cache:built-at"' <<<"$tags" || { echo "snapshot-pool-volume: $volume has no ebs-cache:built-at tag" >&2; exit 1; }
  snapshot=$(aws ec2 "${endpoint[@]}" create-snapshot --region "$region" --volume-id "$volume" \
    --description "ebs-cache pool snapshot of $volume" \
    --tag-specifications "[{\"ResourceType\":\"snapshot\",\"Tags\":$tags}]" \
    --query SnapshotId --output text)
  echo "snapshot-pool-volume: $snapshot of $volume ($region)"
  # One `wait` gives up after 10 minutes; a large first snapshot takes longer.
  for attempt in $(seq 1 12); do
    if aws ec2 "${endpoint[@]}" wait snapshot-completed --region "$region" --snapshot-ids "$snapshot"; then break; fi
    [ "$attempt" -lt 12 ] || { echo "snapshot-pool-volume: $snapshot not completed after 2 hours" >&2; exit 1; }
  done
  echo "snapshot-pool-volume: $snapshot completed"
done
