#!/usr/bin/env bash
# Asks AWS's own IAM evaluators, in the caller's account, about the agent's policy:
#
#   scripts/check-iam.sh [--policy FILE] [--region REGION]
#
#   1. `aws accessanalyzer validate-policy --policy-type IDENTITY_POLICY`: every finding is printed;
#      an ERROR or SECURITY_WARNING fails the check.
#   2. `aws iam simulate-custom-policy` over the main cases of the policy's test matrix (CASES
#      below; test/iam/iam.test.ts runs the same lines through an independent evaluator): each
#      resource of a call is simulated on its own, with the context EC2 gives it there.
#
# FILE defaults to the policy beside this script (iam/ebs-cache-agent-policy.json), else the one
# installed under /usr/share/doc/ebs-cache-agent/. Run it with an operator's credentials allowed
# access-analyzer:ValidatePolicy and iam:SimulateCustomPolicy (and sts:GetCallerIdentity, which
# needs no permission). It creates, changes and deletes nothing; the instance and volume ids are
# made up.
#
# Exit: 0 every case decided as intended and no blocking finding; 1 otherwise; 2 usage, no aws
# CLI, no credentials, or a policy file that cannot be read.
set -euo pipefail

# One case a line: expected decision, action, resource (volume, snapshot, instance:own,
# instance:other, new-volume, key: a KMS key), then the request's context as KEY=VALUE (a list:
# VALUE,VALUE). The KMS cases are the grants EC2 uses for an encrypted volume, through EC2 only.
# Every request also carries ec2:SourceInstanceARN (the own instance), and an instance resource
# its ec2:InstanceID.
CASES='
allowed ec2:AttachVolume volume aws:ResourceTag/ebs-cache:managed=true
allowed ec2:AttachVolume instance:own
denied  ec2:AttachVolume instance:other
denied  ec2:AttachVolume volume aws:ResourceTag/Name=database
allowed ec2:DetachVolume volume aws:ResourceTag/ebs-cache:managed=true
allowed ec2:DetachVolume instance:own
denied  ec2:DetachVolume instance:other
allowed ec2:CreateVolume new-volume aws:RequestTag/ebs-cache:managed=true aws:TagKeys=ebs-cache:managed
denied  ec2:CreateVolume new-volume aws:RequestTag/Name=scratch aws:TagKeys=Name
allowed ec2:CreateVolume new-volume aws:RequestTag/ebs-cache:managed=true aws:RequestTag/CostCenter=42 aws:TagKeys=ebs-cache:managed,CostCenter ec2:Encrypted=true
allowed ec2:CreateVolume snapshot aws:ResourceTag/ebs-cache:managed=true
denied  ec2:CreateVolume snapshot aws:ResourceTag/Name=backup
allowed ec2:CreateTags new-volume ec2:CreateAction=CreateVolume aws:RequestTag/ebs-cache:managed=true aws:TagKeys=ebs-cache:managed
allowed ec2:CreateTags volume aws:ResourceTag/ebs-cache:managed=true aws:RequestTag/ebs-cache:claimed-by=i-0a11ce0000000000a aws:TagKeys=ebs-cache:claimed-by
denied  ec2:CreateTags volume aws:ResourceTag/ebs-cache:managed=true aws:RequestTag/Name=mine aws:TagKeys=Name
denied  ec2:CreateTags volume aws:ResourceTag/Name=database aws:RequestTag/ebs-cache:managed=true aws:TagKeys=ebs-cache:managed
allowed ec2:DeleteTags volume aws:ResourceTag/ebs-cache:managed=true aws:TagKeys=ebs-cache:claimed-by,ebs-cache:released-at
denied  ec2:DeleteTags volume aws:ResourceTag/ebs-cache:managed=true aws:TagKeys=ebs-cache:managed
allowed ec2:DeleteVolume volume aws:ResourceTag/ebs-cache:managed=true
denied  ec2:DeleteVolume volume aws:ResourceTag/Name=database
denied  ec2:DeleteVolume volume aws:ResourceTag/ebs-cache:managed=true aws:ResourceTag/ebs-cache:keep=true
allowed kms:CreateGrant key kms:ViaService=ec2.eu-west-1.amazonaws.com kms:GrantIsForAWSResource=true
denied  kms:CreateGrant key
allowed kms:GenerateDataKeyWithoutPlaintext key kms:ViaService=ec2.eu-west-1.amazonaws.com
denied  kms:Decrypt key
'
OWN=i-0a11ce0000000000a
OTHER=i-0b0b000000000000b

usage() {
  echo "usage: $0 [--policy FILE] [--region REGION]" >&2
  exit 2
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
policy=""
region=""
while [ $# -gt 0 ]; do
  case "$1" in
    --policy) [ $# -ge 2 ] || usage; policy=$2; shift 2 ;;
    --region) [ $# -ge 2 ] || usage; region=$2; shift 2 ;;
    -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
if [ -z "$policy" ]; then
  for candidate in "$here/../iam/ebs-cache-agent-policy.json" /usr/share/doc/ebs-cache-agent/ebs-cache-agent-policy.json; do
    if [ -r "$candidate" ]; then policy=$candidate; break; fi
  done
fi
if [ -z "$policy" ] || [ ! -r "$policy" ]; then
  echo "check-iam: cannot read the policy ${policy:-(none found; pass --policy FILE)}" >&2
  exit 2
fi

if ! command -v aws > /dev/null 2>&1; then
  echo "check-iam: the aws CLI is not installed (or not on PATH): install it, then run this again" >&2
  exit 2
fi
aws_args=(--output text)
if [ -n "$region" ]; then aws_args+=(--region "$region"); fi
if ! account=$(aws "${aws_args[@]}" sts get-caller-identity --query Account 2>&1); then
  echo "check-iam: no usable AWS credentials (aws sts get-caller-identity said: $account)" >&2
  echo "check-iam: configure them (aws configure, AWS_PROFILE, or the environment) and run this again" >&2
  exit 2
fi
if [ -z "$region" ]; then region=$(aws configure get region 2>/dev/null || true); fi
region=${region:-us-east-1}
aws_args+=(--region "$region")

failed=0

echo "== aws accessanalyzer validate-policy ($policy)"
if ! findings=$(aws "${aws_args[@]}" accessanalyzer validate-policy --policy-type IDENTITY_POLICY \
  --policy-document "file://$policy" --query 'findings[].[findingType,issueCode,findingDetails]' 2>&1); then
  echo "check-iam: validate-policy failed: $findings" >&2
  exit 2
fi
if [ -z "$findings" ] || [ "$findings" = "None" ]; then
  echo "no findings"
else
  echo "$findings"
  if grep -Eq '^(ERROR|SECURITY_WARNING)' <<< "$findings"; then
    echo "check-iam: validate-policy reports an ERROR or SECURITY_WARNING" >&2
    failed=1
  fi
fi

# The ARN of a case's resource.
resource_arn() {
  case "$1" in
    volume) echo "arn:aws:ec2:$region:$account:volume/vol-0000000000000000a" ;;
    new-volume) echo "arn:aws:ec2:$region:$account:volume/vol-0000000000000000b" ;;
    snapshot) echo "arn:aws:ec2:$region::snapshot/snap-0000000000000000a" ;;
    instance:own) echo "arn:aws:ec2:$region:$account:instance/$OWN" ;;
    instance:other) echo "arn:aws:ec2:$region:$account:instance/$OTHER" ;;
    key) echo "arn:aws:kms:$region:$account:key/1234abcd-12ab-34cd-56ef-1234567890ab" ;;
    *) echo "check-iam: unknown resource $1 in CASES" >&2; exit 2 ;;
  esac
}

# One context entry as JSON: KEY=VALUE, a list for aws:TagKeys, a boolean for the Bool keys.
context_entry() {
  local key=${1%%=*} value=${1#*=} type=string
  case "$key" in
    aws:TagKeys) type=stringList ;;
    kms:GrantIsForAWSResource | ec2:Encrypted) type=boolean ;;
  esac
  printf '{"ContextKeyName":"%s","ContextKeyValues":["%s"],"ContextKeyType":"%s"}' "$key" "${value//,/\",\"}" "$type"
}

echo
echo "== aws iam simulate-custom-policy"
printf '%-8s %-35s %-15s %-13s %s\n' expected action resource decision context
while read -r expected action resource context; do
  [ -n "$expected" ] || continue
  arn=$(resource_arn "$resource")
  entries=$(context_entry "ec2:SourceInstanceARN=arn:aws:ec2:$region:$account:instance/$OWN")
  case "$resource" in
    instance:own) entries+=",$(context_entry "ec2:InstanceID=$OWN")" ;;
    instance:other) entries+=",$(context_entry "ec2:InstanceID=$OTHER")" ;;
  esac
  for item in $context; do entries+=",$(context_entry "$item")"; done
  if ! decision=$(aws "${aws_args[@]}" iam simulate-custom-policy --policy-input-list "file://$policy" \
    --action-names "$action" --resource-arns "$arn" --context-entries "[$entries]" \
    --query 'EvaluationResults[0].EvalDecision' 2>&1); then
    echo "check-iam: simulate-custom-policy failed for $action on $resource: $decision" >&2
    exit 2
  fi
  verdict=denied
  if [ "$decision" = allowed ]; then verdict=allowed; fi
  mark=""
  if [ "$verdict" != "$expected" ]; then mark="   <-- expected $expected"; failed=1; fi
  printf '%-8s %-35s %-15s %-13s %s%s\n' "$expected" "$action" "$resource" "$decision" "$context" "$mark"
done <<< "$CASES"

if [ "$failed" -ne 0 ]; then
  echo "check-iam: the policy is not decided as intended (see above)" >&2
  exit 1
fi
echo
echo "check-iam: every case decided as intended"
