/** CreateTags, DeleteTags, DescribeTags on volumes, snapshots, instances and network interfaces. */
import { Ec2Error, missingParameter } from "../ec2-error.ts";
import { applyFilters, type FilterFields } from "../filters.ts";
import { kindOfId, type ResourceKind } from "../ids.ts";
import { paginate } from "../pagination.ts";
import {
  checkTags,
  getInstance,
  getNetworkInterface,
  getSnapshot,
  getVolume,
  MAX_TAGS,
  visibleVolumes,
  type ActionContext,
  type ActionHandler,
} from "./context.ts";

/** The live tag record of a resource, after checking that it exists. */
function tagsOf(
  ctx: ActionContext,
  action: string | undefined,
  id: string,
): { kind: ResourceKind; tags: Record<string, string> } {
  const kind = kindOfId(id);
  if (kind === "volume") return { kind, tags: getVolume(ctx, id, action).tags };
  if (kind === "snapshot") return { kind, tags: getSnapshot(ctx, id).tags };
  if (kind === "instance") return { kind, tags: getInstance(ctx, id).tags };
  if (kind === "network-interface") return { kind, tags: getNetworkInterface(ctx, id).tags };
  throw new Ec2Error("InvalidID", `The ID '${id}' is not valid`);
}

function resources(ctx: ActionContext, params: { list(prefix: string): string[]; action: string | undefined }) {
  const ids = params.list("ResourceId");
  if (ids.length === 0) throw missingParameter("ResourceId");
  // Every resource is checked before any is changed: one bad id leaves all untouched, as on EC2.
  return ids.map((id) => ({ id, ...tagsOf(ctx, params.action, id) }));
}

function afterChange(ctx: ActionContext, targets: { id: string; kind: ResourceKind }[]): void {
  ctx.store.commit();
  for (const t of targets) if (t.kind === "instance") ctx.syncInstanceTags(t.id);
}

/**
 * Tag keys an instance may carry while its tags are served by IMDS (InstanceMetadataTags): the
 * EC2 user guide allows only letters, digits and `+ - = . , _ : @`, no spaces or `/`, and not
 * `.`, `..` or `_index` alone, since each key becomes a path under /latest/meta-data/tags/instance.
 */
const IMDS_TAG_KEY = /^[A-Za-z0-9+\-=.,_:@]+$/;
const IMDS_RESERVED_KEYS = new Set([".", "..", "_index"]);

function checkImdsTagKeys(ctx: ActionContext, targets: { id: string; kind: ResourceKind }[], keys: string[]): void {
  for (const t of targets) {
    if (t.kind !== "instance" || !getInstance(ctx, t.id).metadataTags) continue;
    const bad = keys.find((key) => !IMDS_TAG_KEY.test(key) || IMDS_RESERVED_KEYS.has(key));
    if (bad !== undefined) {
      throw new Ec2Error(
        "InvalidParameterValue",
        `Tag key '${bad}' is not allowed on instance '${t.id}', which allows tags in instance metadata: ` +
          "keys may contain only letters, digits and + - = . , _ : @, and may not be '.', '..' or '_index'.",
      );
    }
  }
}

export const createTags: ActionHandler = (ctx, params) => {
  const targets = resources(ctx, params);
  const tags = params.tags("Tag");
  if (tags.length === 0) throw missingParameter("Tag");
  const add = checkTags(tags);
  checkImdsTagKeys(ctx, targets, Object.keys(add));
  for (const t of targets) {
    if (Object.keys({ ...t.tags, ...add }).length > MAX_TAGS) {
      throw new Ec2Error(
        "TagLimitExceeded",
        `The maximum number of tags (${MAX_TAGS}) for resource '${t.id}' has been reached.`,
      );
    }
  }
  for (const t of targets) Object.assign(t.tags, add);
  afterChange(ctx, targets);
  return { return: true };
};

export const deleteTags: ActionHandler = (ctx, params) => {
  const targets = resources(ctx, params);
  const tags = params.tags("Tag");
  for (const t of targets) {
    // No Tag.N at all deletes every tag; a tag without a value deletes the key whatever its
    // value; with a value (even "") only when the value matches.
    const doomed = tags.length === 0 ? Object.keys(t.tags).map((key) => ({ key, value: undefined })) : tags;
    for (const { key, value } of doomed) {
      if (Object.hasOwn(t.tags, key) && (value === undefined || t.tags[key] === value)) delete t.tags[key];
    }
  }
  afterChange(ctx, targets);
  return { return: true };
};

/** One row of DescribeTags; `seq` orders rows by resource, then key. */
interface TagRow {
  seq: number;
  resourceId: string;
  resourceType: ResourceKind;
  key: string;
  value: string;
}

/** Tag rows per resource; a resource has at most MAX_TAGS (< 100) tags, so seq·100 + index is unique. */
function rows(ctx: ActionContext, action: string | undefined): TagRow[] {
  const out: TagRow[] = [];
  const add = (seq: number, resourceId: string, resourceType: ResourceKind, tags: Record<string, string>) =>
    Object.keys(tags)
      .sort()
      .forEach((key, i) => out.push({ seq: seq * 100 + i, resourceId, resourceType, key, value: tags[key] ?? "" }));
  for (const v of visibleVolumes(ctx, action)) add(v.seq, v.volumeId, "volume", v.tags);
  for (const s of ctx.store.snapshots()) add(s.seq, s.snapshotId, "snapshot", s.tags);
  for (const i of ctx.store.instances()) add(i.seq, i.instanceId, "instance", i.tags);
  for (const n of ctx.store.networkInterfaces()) add(n.seq, n.networkInterfaceId, "network-interface", n.tags);
  return out.sort((a, b) => a.seq - b.seq);
}

const TAG_FILTERS: FilterFields<TagRow> = {
  "resource-id": (r) => [r.resourceId],
  "resource-type": (r) => [r.resourceType],
  key: (r) => [r.key],
  value: (r) => [r.value],
};

export const describeTags: ActionHandler = (ctx, params) => {
  const limits = { min: 5, max: 1000 };
  paginate([], params, limits);
  const matching = applyFilters(rows(ctx, params.action), params.filters(), TAG_FILTERS, (r) => ({ [r.key]: r.value }));
  const page = paginate(matching, params, limits);
  return {
    tagSet: page.items.map(({ resourceId, resourceType, key, value }) => ({ resourceId, resourceType, key, value })),
    nextToken: page.nextToken,
  };
};
