/**
 * What IAM is asked about one EC2 request: for each resource EC2 authorizes the call against,
 * its ARN and the request context there (the caller's `ec2:SourceInstanceARN`, the resource's
 * tags as `aws:ResourceTag/…`, the tags the request sets as `aws:RequestTag/…` and `aws:TagKeys`,
 * `ec2:CreateAction` for tags set by a create call). A call is allowed only when every one is.
 * The resources are looked up as the action would look them up, so a missing one gets the
 * action's own NotFound answer, before any decision.
 */
import { getInstance, getNetworkInterface, getSnapshot, getVolume, type ActionContext } from "../actions/context.ts";
import type { Params, TagParam } from "../params.ts";
import { LAB_ACCOUNT, type LabPrincipal } from "./principals.ts";

/** A condition key's value: a string, or a list for the multivalued keys (`aws:TagKeys`). */
export type ContextValues = Record<string, string | string[]>;

/** One question to IAM: may the caller do `action` on `resource`, in this context? */
export interface IamCheck {
  /** `ec2:AttachVolume`, `ebs:PutSnapshotBlock`. */
  action: string;
  resource: string;
  context: ContextValues;
}

export const volumeArn = (region: string, id: string) => `arn:aws:ec2:${region}:${LAB_ACCOUNT}:volume/${id}`;
export const instanceArn = (region: string, id: string) => `arn:aws:ec2:${region}:${LAB_ACCOUNT}:instance/${id}`;
const networkInterfaceArn = (region: string, id: string) =>
  `arn:aws:ec2:${region}:${LAB_ACCOUNT}:network-interface/${id}`;
/** Snapshot ARNs carry no account (EC2's form). */
export const snapshotArn = (region: string, id: string) => `arn:aws:ec2:${region}::snapshot/${id}`;

/** The context every request of this caller carries. */
export function callerContext(region: string, principal: LabPrincipal): ContextValues {
  return {
    "ec2:Region": region,
    ...(principal.instanceId !== undefined
      ? { "ec2:SourceInstanceARN": instanceArn(region, principal.instanceId) }
      : {}),
  };
}

export function resourceTagContext(tags: Record<string, string>): ContextValues {
  return Object.fromEntries(Object.entries(tags).map(([key, value]) => [`aws:ResourceTag/${key}`, value]));
}

/** `aws:RequestTag/…` and `aws:TagKeys` of the tags a request sets. */
export function requestTagContext(tags: Record<string, string>): ContextValues {
  return {
    ...Object.fromEntries(Object.entries(tags).map(([key, value]) => [`aws:RequestTag/${key}`, value])),
    "aws:TagKeys": Object.keys(tags),
  };
}

function tagRecord(tags: readonly TagParam[]): Record<string, string> {
  return Object.fromEntries(tags.map(({ key, value }) => [key, value ?? ""]));
}

/** The tags of a create call's TagSpecifications (their validation is the action's). */
function specifiedTags(params: Params): Record<string, string> {
  return Object.assign({}, ...params.tagSpecifications().map((spec) => tagRecord(spec.tags))) as Record<string, string>;
}

/** A resource named by a tag call's `ResourceId.N`: its ARN and its tags now. */
function taggedResource(ctx: ActionContext, action: string, id: string): { arn: string; tags: Record<string, string> } {
  if (id.startsWith("snap-")) return { arn: snapshotArn(ctx.region, id), tags: getSnapshot(ctx, id).tags };
  if (id.startsWith("i-")) return { arn: instanceArn(ctx.region, id), tags: getInstance(ctx, id).tags };
  if (id.startsWith("eni-")) {
    return { arn: networkInterfaceArn(ctx.region, id), tags: getNetworkInterface(ctx, id).tags };
  }
  return { arn: volumeArn(ctx.region, id), tags: getVolume(ctx, id, action).tags };
}

/** The checks of one EC2 request by `principal`. */
export function ec2Checks(ctx: ActionContext, params: Params, principal: LabPrincipal): IamCheck[] {
  const action = params.action ?? "";
  const iamAction = `ec2:${action}`;
  const caller = callerContext(ctx.region, principal);
  const check = (resource: string, context: ContextValues = {}, name = iamAction): IamCheck => ({
    action: name,
    resource,
    context: { ...caller, ...context },
  });
  const volume = (id: string) => {
    const record = getVolume(ctx, id, action);
    return { record, check: check(volumeArn(ctx.region, id), resourceTagContext(record.tags)) };
  };
  const instance = (id: string) => {
    const record = getInstance(ctx, id);
    return check(instanceArn(ctx.region, id), { ...resourceTagContext(record.tags), "ec2:InstanceID": id });
  };
  /** EC2 authorizes the tags of a create call as a CreateTags of its own on the new resource. */
  const tagsOnCreate = (resource: string, tags: Record<string, string>): IamCheck[] =>
    Object.keys(tags).length === 0
      ? []
      : [check(resource, { ...requestTagContext(tags), "ec2:CreateAction": action }, "ec2:CreateTags")];

  switch (action) {
    case "AttachVolume":
      return [volume(params.required("VolumeId")).check, instance(params.required("InstanceId"))];
    case "DetachVolume": {
      const { record, check: onVolume } = volume(params.required("VolumeId"));
      const instanceId = params.str("InstanceId") ?? record.attachment?.instanceId;
      return instanceId === undefined ? [onVolume] : [onVolume, instance(instanceId)];
    }
    case "CreateVolume": {
      const tags = specifiedTags(params);
      const created = volumeArn(ctx.region, "*");
      const snapshotId = params.str("SnapshotId") || undefined;
      const fromSnapshot = snapshotId
        ? [check(snapshotArn(ctx.region, snapshotId), resourceTagContext(getSnapshot(ctx, snapshotId).tags))]
        : [];
      return [check(created, requestTagContext(tags)), ...fromSnapshot, ...tagsOnCreate(created, tags)];
    }
    case "DeleteVolume":
      return [volume(params.required("VolumeId")).check];
    case "CreateSnapshot": {
      const tags = specifiedTags(params);
      const created = snapshotArn(ctx.region, "*");
      return [
        volume(params.required("VolumeId")).check,
        check(created, requestTagContext(tags)),
        ...tagsOnCreate(created, tags),
      ];
    }
    case "DeleteSnapshot": {
      const id = params.required("SnapshotId");
      return [check(snapshotArn(ctx.region, id), resourceTagContext(getSnapshot(ctx, id).tags))];
    }
    case "CreateTags":
    case "DeleteTags": {
      const tags = params.tags("Tag");
      // DeleteTags without Tag.N deletes every tag: the request names no keys (aws:TagKeys is absent).
      const sent: ContextValues =
        action === "CreateTags"
          ? requestTagContext(tagRecord(tags))
          : tags.length > 0
            ? { "aws:TagKeys": tags.map((t) => t.key) }
            : {};
      return params.list("ResourceId").map((id) => {
        const target = taggedResource(ctx, action, id);
        return check(target.arn, { ...resourceTagContext(target.tags), ...sent });
      });
    }
    case "StartInstances":
    case "StopInstances":
    case "TerminateInstances":
      return params.list("InstanceId").map(instance);
    default:
      // The Describe* calls: EC2 authorizes them against no resource.
      return [check("*")];
  }
}

/**
 * The check of one EBS direct request: StartSnapshot against the new snapshot with the tags its
 * body sets, the others against the snapshot they name with its tags (none when it is unknown:
 * the call's own answer says so).
 */
export function ebsChecks(
  ctx: ActionContext,
  action: string,
  snapshotId: string | undefined,
  body: Buffer,
  principal: LabPrincipal,
): IamCheck[] {
  const caller = callerContext(ctx.region, principal);
  if (action === "StartSnapshot") {
    let tags: Record<string, string> = {};
    try {
      const request = JSON.parse(body.toString("utf8") || "{}") as { Tags?: unknown };
      if (Array.isArray(request.Tags)) {
        tags = Object.fromEntries(
          (request.Tags as { Key?: unknown; Value?: unknown }[]).map((t) => [String(t.Key), String(t.Value ?? "")]),
        );
      }
    } catch {
      // Not JSON: the call's own validation answers it.
    }
    return [
      {
        action: "ebs:StartSnapshot",
        resource: snapshotArn(ctx.region, "*"),
        context: { ...caller, ...requestTagContext(tags) },
      },
    ];
  }
  const snapshot = snapshotId === undefined ? undefined : ctx.store.snapshot(snapshotId);
  if (!snapshot || snapshotId === undefined) return [];
  return [
    {
      action: `ebs:${action}`,
      resource: snapshotArn(ctx.region, snapshotId),
      context: { ...caller, ...resourceTagContext(snapshot.tags) },
    },
  ];
}
