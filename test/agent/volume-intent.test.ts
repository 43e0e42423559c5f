/**
 * An instance's intent (keep, TTL) on its volume's tags, in the pure parts: what the claim writes
 * and how a rerun converges (src/agent/boot/claim-tags.ts), what a stop and the release change
 * when the intent changed since the claim, where the intent comes from (src/agent/settings.ts),
 * and how gc reads a recorded TTL.
 */
import t from "tap";
import { CLAIM_CLEARS, claimTagChanges } from "../../src/agent/boot/claim-tags.ts";
import { judgeVolume } from "../../src/agent/gc/plan.ts";
import { labelsTagAsOsparcWrites } from "../../src/agent/labels-tag.ts";
import type { VolumeInfo } from "../../src/agent/ports.ts";
import { releaseTags } from "../../src/agent/release/plan.ts";
import { resolveReleaseSettings, resolveSettings } from "../../src/agent/settings.ts";
import {
  intentChanges,
  keepFor,
  recordedTtlHours,
  type KeepAsked,
  type TagChanges,
  type VolumeIntent,
} from "../../src/agent/volume-intent.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { VolumeTag } from "../../src/tags.ts";

const ME = "i-0aaa";
const now = new Date("2030-01-01T12:00:00.000Z");
const workspace = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "workspace", [VolumeTag.userId]: "21" };
const pool = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool" };
const earlierRelease = {
  [VolumeTag.releasedAt]: "2029-12-31T00:00:00.000Z",
  [VolumeTag.expiresAt]: "2030-01-01T00:00:00.000Z",
};
const keep: VolumeIntent = { keep: true, ttlHours: 72 };
const plain: VolumeIntent = { keep: false, ttlHours: 24 };

/** The tags after one CreateTags (set) and one DeleteTags (remove), as EC2 would leave them. */
function applied(tags: Record<string, string>, changes: TagChanges): Record<string, string> {
  const out = { ...tags, ...changes.set };
  for (const key of changes.remove) delete out[key];
  return out;
}
const nothing: TagChanges = { set: {}, remove: [] };

t.test(
  "the claim: its tags and the instance's intent in one CreateTags, an earlier tenancy's leftovers in one DeleteTags",
  async (t) => {
    const first = claimTagChanges({ ...workspace, ...earlierRelease }, ME, keep, now);
    t.same(
      first.set,
      {
        [VolumeTag.claimedBy]: ME,
        [VolumeTag.claimedAt]: "2030-01-01T12:00:00.000Z",
        [VolumeTag.ttlHours]: "72",
        [VolumeTag.keep]: "true",
        [VolumeTag.keepBy]: ME,
      },
      "claimed-by, claimed-at, the TTL and keep, marked as this instance's",
    );
    t.same(first.remove, [VolumeTag.releasedAt, VolumeTag.expiresAt], "the earlier release's expiry");
    const done = applied({ ...workspace, ...earlierRelease }, first);
    t.same(
      claimTagChanges(done, ME, keep, new Date("2030-01-02T00:00:00Z")),
      nothing,
      "a rerun after both calls: nothing to do",
    );
    const killed = { ...workspace, ...earlierRelease, ...first.set };
    t.same(
      claimTagChanges(killed, ME, keep, now),
      { set: {}, remove: first.remove },
      "a rerun after a kill between them: the DeleteTags only",
    );

    const poolClaim = claimTagChanges(
      { ...pool, ...earlierRelease, [VolumeTag.lastError]: "x", [VolumeTag.lastErrorAt]: "2029-12-31T00:00:00.000Z" },
      ME,
      keep,
      now,
    );
    t.same(
      Object.keys(poolClaim.set),
      [VolumeTag.claimedBy, VolumeTag.claimedAt, VolumeTag.ttlHours],
      "a pool volume: the TTL, never keep",
    );
    t.same(poolClaim.remove, [...CLAIM_CLEARS], "and every leftover of an earlier tenancy");
    const created = claimTagChanges({ ...pool, [VolumeTag.claimedBy]: ME }, ME, plain, now);
    t.same(
      created.set,
      { [VolumeTag.claimedAt]: "2030-01-01T12:00:00.000Z", [VolumeTag.claimedBy]: ME, [VolumeTag.ttlHours]: "24" },
      "a volume this boot created: its claim time added",
    );
  },
);

t.test(
  "the intent changes between two runs of the boot (a reboot with other instance tags): at most one CreateTags " +
    "and one DeleteTags",
  async (t) => {
    const kept = applied(workspace, claimTagChanges(workspace, ME, keep, now));
    t.same(
      claimTagChanges(kept, ME, plain, now),
      { set: { [VolumeTag.ttlHours]: "24" }, remove: [VolumeTag.keep, VolumeTag.keepBy] },
      "keep no longer asked: this instance's keep goes, the TTL follows",
    );
    const durable = { ...workspace, [VolumeTag.keep]: "true" };
    t.same(
      intentChanges({ ...durable, [VolumeTag.ttlHours]: "24" }, ME, plain),
      nothing,
      "a keep nobody's claim wrote (a person's, a release's) stays",
    );
    t.same(
      intentChanges({ ...durable, [VolumeTag.keepBy]: "i-dead", [VolumeTag.ttlHours]: "24" }, ME, plain),
      { set: {}, remove: [VolumeTag.keepBy] },
      "a keep whose instance died holding the volume: stays, nobody's now",
    );
    t.same(
      intentChanges({ ...durable, [VolumeTag.keepBy]: "i-dead", [VolumeTag.ttlHours]: "72" }, ME, keep),
      { set: {}, remove: [VolumeTag.keepBy] },
      "asked again: the keep is there, and not taken back by this instance later either",
    );
    t.same(
      intentChanges({ ...durable, [VolumeTag.ttlHours]: "72" }, ME, keep),
      nothing,
      "asked, and kept already: nothing",
    );
  },
);

t.test("the release ends the intent: a keep no longer asked goes, one still asked becomes nobody's", async (t) => {
  const releasedAt = now;
  const dropped = releaseTags({ instanceId: ME, kind: "workspace", keep: false, ttlHours: 24, releasedAt, keepBy: ME });
  t.same(
    dropped.set,
    { [VolumeTag.releasedAt]: "2030-01-01T12:00:00.000Z", [VolumeTag.expiresAt]: "2030-01-02T12:00:00.000Z" },
    "keep removed since the claim: an expiry",
  );
  t.same(dropped.removeKeys, [VolumeTag.keep, VolumeTag.keepBy], "and the keep its claim wrote removed");
  const still = releaseTags({ instanceId: ME, kind: "workspace", keep: true, ttlHours: 24, releasedAt, keepBy: ME });
  t.same(still.set, { [VolumeTag.releasedAt]: "2030-01-01T12:00:00.000Z", [VolumeTag.keep]: "true" });
  t.same(
    still.remove,
    { [VolumeTag.claimedBy]: ME, [VolumeTag.keepBy]: ME },
    "still asked: kept, the mark goes with the claim (a later claimer never takes it back)",
  );
  const others = releaseTags({
    instanceId: ME,
    kind: "workspace",
    keep: false,
    ttlHours: 24,
    releasedAt,
    keepBy: "i-other",
  });
  t.same(others.removeKeys, [], "a keep this instance did not write is not its to remove");
});

t.test("where the intent comes from: the same rule for the boot and the release", async (t) => {
  const config = defaultConfig();
  const identity = (tags: Record<string, string>) => ({
    instanceId: ME,
    region: "eu-west-1",
    availabilityZone: "eu-west-1a",
    tags,
    tagsSource: "ec2" as const,
  });
  const labels = (extra: Record<string, unknown>) =>
    labelsTagAsOsparcWrites(config.workspace.labelsTag, { "user-id": "21", ...extra });
  const fromTag = { by: "labels", ids: { "user-id": "21" }, origin: `instance tag ${config.workspace.labelsTag}` };
  const cases: Array<[string, Record<string, string>, VolumeIntent, KeepAsked]> = [
    ["nothing asked", {}, { keep: false, ttlHours: 24 }, { by: "nobody" }],
    [
      "instance tags",
      { "ebs-cache:keep": "true", "ebs-cache:ttl-hours": "72" },
      { keep: true, ttlHours: 72 },
      { by: "instance", keep: true },
    ],
    [
      "keep in the labels tag",
      labels({ "io.simcore.ebs-cache.keep": "true" }),
      { keep: true, ttlHours: 24 },
      { ...fromTag, keep: true } as KeepAsked,
    ],
    [
      "a malformed keep in the labels tag: kept rather than guessed",
      labels({ "io.simcore.ebs-cache.keep": "yes" }),
      { keep: true, ttlHours: 24 },
      { ...fromTag, keep: true } as KeepAsked,
    ],
    ["the labels without keep", labels({}), { keep: false, ttlHours: 24 }, { ...fromTag, keep: false } as KeepAsked],
    [
      "the instance tag wins over the labels",
      { ...labels({ "io.simcore.ebs-cache.keep": "true" }), "ebs-cache:keep": "false" },
      { keep: false, ttlHours: 24 },
      { by: "instance", keep: false },
    ],
  ];
  for (const [what, tags, intent, asked] of cases) {
    const boot = resolveSettings(config, identity(tags), { withDocker: false });
    t.same(boot.ok && boot.value.boot.intent, intent, `boot: ${what}`);
    const release = resolveReleaseSettings(config, identity(tags), { defaultDataRoot: undefined });
    t.same(release.release.keep, asked, `release: ${what}`);
    t.equal(release.release.ttlHours, intent.ttlHours, `release's TTL: ${what}`);
  }
});

t.test("gc: a never-released volume expires by the TTL its instance recorded; a recorded keep keeps it", async (t) => {
  const opts = { now, ttlHours: 24 };
  const dead = (tags: Record<string, string>): VolumeInfo => ({
    volumeId: "vol-1",
    availabilityZone: "eu-west-1a",
    state: "available",
    sizeGiB: 10,
    tags: { ...workspace, [VolumeTag.claimedBy]: "i-dead", [VolumeTag.claimedAt]: "2029-12-01T00:00:00.000Z", ...tags },
  });
  const recorded = judgeVolume(dead({ [VolumeTag.ttlHours]: "72" }), opts);
  t.equal(recorded.verdict, "tag-expiry");
  t.equal(
    recorded.tags?.[VolumeTag.expiresAt],
    "2030-01-04T12:00:00.000Z",
    "now + 72 h, the instance's TTL, not gc's 24",
  );
  t.match(recorded.reason, /its instance's TTL of 72 h/);
  t.equal(
    judgeVolume(dead({}), opts).tags?.[VolumeTag.expiresAt],
    "2030-01-02T12:00:00.000Z",
    "none recorded (an older agent's claim): gc's TTL",
  );
  t.equal(
    judgeVolume(dead({ [VolumeTag.ttlHours]: "72", [VolumeTag.keep]: "true", [VolumeTag.keepBy]: "i-dead" }), opts)
      .verdict,
    "kept",
    "keep recorded at the claim: kept",
  );
  t.equal(
    judgeVolume(
      dead({ ...earlierRelease, [VolumeTag.ttlHours]: "48", [VolumeTag.keep]: "true", [VolumeTag.keepBy]: "i-dead" }),
      opts,
    ).verdict,
    "kept",
    "died between the claim's CreateTags and DeleteTags: kept all the same",
  );
  t.equal(
    judgeVolume(dead({ [VolumeTag.ttlHours]: "soon" }), opts).verdict,
    "malformed",
    "a malformed TTL is not guessed",
  );
  for (const text of ["0", "8761", "-1", "1e3", " 24"])
    t.equal(recordedTtlHours({ [VolumeTag.ttlHours]: text }).kind, "malformed", JSON.stringify(text));
  t.same(recordedTtlHours({ [VolumeTag.ttlHours]: "1.5" }), { kind: "hours", hours: 1.5 });
});

t.test(
  "a keep the labels ask applies only to a workspace of their ids; nobody's: what the claim recorded",
  async (t) => {
    const ofA = {
      volumeId: "vol-a",
      tags: { ...workspace, [VolumeTag.userId]: "A", [VolumeTag.workspaceKeys]: "user-id" },
    };
    const ownKeep = { ...ofA, tags: { ...ofA.tags, [VolumeTag.keep]: "true", [VolumeTag.keepBy]: ME } };
    const labels = (ids: Record<string, string> | undefined, keep: boolean): KeepAsked => ({
      by: "labels",
      keep,
      ...(ids ? { ids } : {}),
      origin: "instance tag io.simcore.autoscaling.ec2_instance.docker_node_labels",
    });
    t.same(keepFor(ofA, ME, labels({ "user-id": "A" }, true)), { keep: true }, "the labels of its own ids");
    const other = keepFor(ofA, ME, labels({ "user-id": "B" }, true));
    t.equal(other.keep, false, "another user's keep is not written on A's workspace");
    t.match(
      other.warning,
      new RegExp(
        "vol-a is the workspace of user-id=A, and the labels \\(instance tag .*\\) name user-id=B: their keep is " +
          "not applied to it; it keeps what its claim recorded \\(no keep\\)",
      ),
      "one line naming both sets of ids",
    );
    t.same(
      { keep: keepFor(ownKeep, ME, labels({ "user-id": "B" }, false)).keep },
      { keep: true },
      "nor does another user's missing keep take A's away",
    );
    t.match(keepFor(ofA, ME, labels(undefined, true)).warning, /name no workspace/, "labels with no ids at all");
    t.match(
      keepFor(ofA, ME, labels({ "user-id": "A", "project-id": "p" }, true)),
      { keep: false, warning: /name user-id=A project-id=p/ },
      "ids of another level are other ids",
    );
    t.same(
      keepFor({ volumeId: "vol-p", tags: pool }, ME, labels({ "user-id": "B" }, true)),
      { keep: true },
      "a pool volume: no warning (never kept anyway)",
    );
    t.same(keepFor(ownKeep, ME, { by: "nobody" }), { keep: true }, "nobody known: the keep its claim wrote stays");
    t.same(keepFor(ofA, ME, { by: "nobody" }), { keep: false }, "and no keep where it wrote none");
    t.same(
      keepFor({ ...ofA, tags: { ...ofA.tags, [VolumeTag.keep]: "true", [VolumeTag.keepBy]: "i-other" } }, ME, {
        by: "nobody",
      }),
      { keep: false },
      "another instance's keep is not this claim's",
    );
    t.same(keepFor(ofA, ME, { by: "instance", keep: true }), { keep: true }, "the instance's own tag holds for any");
  },
);
