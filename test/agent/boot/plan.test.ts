/** The boot planner: pure, tested with plain objects. */
import t from "tap";
import {
  createSpecFrom,
  lookupsNeeded,
  planBoot,
  poolQuery,
  selectSource,
  workspaceQuery,
} from "../../../src/agent/boot/plan.ts";
import { candidateOrder, isInTransit, isQuarantined, orderCandidates } from "../../../src/agent/volume-rules.ts";
import { preparedInThisBoot } from "../../../src/agent/boot/prepared-record.ts";
import type { SnapshotInfo, VolumeInfo } from "../../../src/agent/ports.ts";
import { identity, observed, settings } from "../../fixtures/builders/boot-plan.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { workspaceIdsOfVolume, workspaceIdTags, type WorkspaceIds } from "../../../src/agent/workspace-ids.ts";

function volume(id: string, over: Partial<VolumeInfo> = {}): VolumeInfo {
  return {
    volumeId: id,
    availabilityZone: "eu-west-1a",
    state: "available",
    sizeGiB: 10,
    tags: { [VolumeTag.kind]: "pool", [VolumeTag.pool]: "p1" },
    ...over,
  };
}
const snapshot: SnapshotInfo = {
  snapshotId: "snap-1",
  state: "completed",
  volumeSizeGiB: 10,
  tags: { [VolumeTag.images]: "a:1", [VolumeTag.imageSet]: "s1" },
};
/** A workspace volume as the agent tags one for `ids`. */
function workspaceVolume(id: string, ids: WorkspaceIds, over: Partial<VolumeInfo> = {}): VolumeInfo {
  return volume(id, {
    tags: {
      [VolumeTag.managed]: "true",
      [VolumeTag.kind]: "workspace",
      [VolumeTag.pool]: "p1",
      ...workspaceIdTags(ids),
    },
    ...over,
  });
}

t.test("disabled: nothing but the report", async (t) => {
  const plan = planBoot({ ...settings, enabled: false }, observed({ pool: [volume("vol-1")] }));
  t.same(
    plan.steps.map((s) => s.step),
    ["report-disabled"],
  );
});

t.test("a volume attached to this instance is reused, whatever the pool holds", async (t) => {
  const mine = volume("vol-9", {
    state: "in-use",
    attachment: { instanceId: "i-0aaa", device: "/dev/sdf", state: "attached" },
  });
  const plan = planBoot(settings, observed({ attached: [mine], pool: [volume("vol-1")], snapshot }));
  t.same(plan.selection, { source: "attached", volumeId: "vol-9", kind: "pool" });
  t.equal(plan.steps[0]?.step, "reuse-attached");
  t.equal(
    plan.steps[1]?.step,
    "tag-claim",
    "a reused volume's claim tags are ensured again (a killed run may not have written them)",
  );
  t.notOk(
    plan.steps.some((s) => s.step === "claim-volume" || s.step === "create-and-claim"),
    "and it is not claimed again",
  );
  t.ok(plan.steps.some((s) => s.step === "verify-docker"));
});

t.test("a workspace volume of this instance's ids comes before the pool", async (t) => {
  const ids = { "user-id": "1", "project-id": "p", "node-id": "n" };
  const ws = workspaceVolume("vol-ws", ids);
  const sel = selectSource(
    { ...settings, workspace: ids },
    observed({ workspace: [ws], pool: [volume("vol-1")], snapshot }),
  );
  t.equal(sel.source, "workspace");
  t.same(sel.source === "workspace" ? sel.candidates : [], ["vol-ws"]);
});

t.test("pool volumes of another zone, or not available, are never candidates", async (t) => {
  const sel = selectSource(
    settings,
    observed({
      pool: [volume("vol-b", { availabilityZone: "eu-west-1b" }), volume("vol-c", { state: "in-use" })],
      snapshot,
    }),
  );
  t.equal(sel.source, "snapshot", "falls to the snapshot");
});

t.test("pool candidates carry the snapshot as a fallback looked up only when needed", async (t) => {
  const sel = selectSource(settings, observed({ pool: [volume("vol-1"), volume("vol-2")] }));
  t.equal(sel.source, "pool");
  if (sel.source !== "pool") return;
  t.same([...sel.candidates].sort(), ["vol-1", "vol-2"]);
  t.same(sel.relist, poolQuery(settings, "eu-west-1a"), "a loss lists the same query again");
  t.ok(sel.fallback, "a fallback without the snapshot itself");
  const spec = createSpecFrom(sel.fallback!, snapshot);
  t.equal(spec?.snapshotId, "snap-1");
  t.equal(spec?.tags[VolumeTag.images], "a:1", "a created volume inherits the image list");
  t.equal(spec?.tags[VolumeTag.managed], "true");
  t.equal(
    createSpecFrom(sel.fallback!, { ...snapshot, state: "pending" }),
    undefined,
    "a pending snapshot makes nothing",
  );
  t.equal(createSpecFrom(sel.fallback!, undefined), undefined);
  t.notOk(
    "fallback" in selectSource({ ...settings, createFromSnapshot: false }, observed({ pool: [volume("vol-1")] })),
    "createFromSnapshot off: no fallback",
  );
});

t.test("quarantine: a volume given back with last-error is no candidate until quarantineHours passed", async (t) => {
  const now = new Date("2026-12-01T12:00:00Z");
  const failed = (at: string | undefined) =>
    volume(`vol-${at ?? "none"}`, {
      tags: {
        ...volume("x").tags,
        [VolumeTag.lastError]: "i-0bbb: foreign filesystem",
        ...(at ? { [VolumeTag.lastErrorAt]: at } : {}),
      },
    });
  const recent = failed("2026-12-01T11:00:00Z");
  const old = failed("2026-12-01T05:00:00Z");
  const untimed = failed(undefined);
  t.ok(isQuarantined(recent, now, 6), "1 h ago: quarantined");
  t.notOk(isQuarantined(old, now, 6), "7 h ago: a candidate again");
  t.ok(isQuarantined(untimed, now, 6), "no time: quarantined (not handed out on a guess)");
  t.notOk(isQuarantined(recent, now, 0), "0 turns quarantine off");
  t.notOk(isQuarantined(volume("vol-ok"), now, 6), "no last-error: never");
  const sel = selectSource(settings, observed({ now, pool: [recent, old, untimed] }));
  t.equal(sel.source, "pool");
  if (sel.source === "pool") t.same(sel.candidates, [old.volumeId], "only the volume past its quarantine");
  t.equal(
    selectSource({ ...settings, createFromSnapshot: false }, observed({ now, pool: [recent, untimed] })).source,
    "none",
    "only quarantined volumes: no candidate",
  );
});

t.test(
  "in transit: another instance's volume between its release's detach and tags, or a boot's new volume, is no " +
    "candidate",
  async (t) => {
    const now = new Date("2026-12-01T12:00:00Z");
    const claimed = (id: string, by: string, at: string | undefined) =>
      volume(id, {
        tags: { ...volume("x").tags, [VolumeTag.claimedBy]: by, ...(at ? { [VolumeTag.claimedAt]: at } : {}) },
      });
    const releasing = claimed("vol-releasing", "i-other", "2026-12-01T11:55:00Z");
    const abandoned = claimed("vol-abandoned", "i-dead", "2026-12-01T11:00:00Z");
    const mine = claimed("vol-mine", identity.instanceId, "2026-12-01T11:59:00Z");
    const untimed = claimed("vol-untimed", "i-old", undefined);
    t.ok(isInTransit(releasing, now, identity.instanceId), "claimed 5 min ago by another instance: on its way");
    t.notOk(
      isInTransit(abandoned, now, identity.instanceId),
      "claimed an hour ago and still available: that instance died",
    );
    t.notOk(isInTransit(mine, now, identity.instanceId), "this instance's own claim (a rerun) is its own");
    t.notOk(isInTransit(untimed, now, identity.instanceId), "a claim without a time (older agents): not held back");
    t.ok(isInTransit(mine, now), "without an instance (the keeper): every recent claim");
    t.notOk(isInTransit(volume("vol-free"), now), "no claim: never");
    const created = { ...claimed("vol-created", "i-other", undefined), createTime: new Date("2026-12-01T11:59:30Z") };
    t.ok(
      isInTransit(created, now, identity.instanceId),
      "a boot's new volume (claimed-by from its creation, no claimed-at yet): timed by its create time",
    );
    t.notOk(
      isInTransit({ ...created, createTime: new Date("2026-12-01T09:00:00Z") }, now, identity.instanceId),
      "created hours ago and never attached: its boot died",
    );
    const workspace = workspaceVolume(
      "vol-ws",
      { "user-id": "21" },
      {
        tags: {
          ...workspaceVolume("x", { "user-id": "21" }).tags,
          [VolumeTag.claimedBy]: "i-dead",
          [VolumeTag.claimedAt]: "2026-12-01T11:58:00Z",
        },
      },
    );
    t.notOk(
      isInTransit(workspace, now, identity.instanceId),
      "a workspace volume whose instance died a minute after claiming it: its next instance takes it",
    );
    const sel = selectSource(settings, observed({ now, pool: [releasing, abandoned, mine, untimed] }));
    t.equal(sel.source, "pool");
    if (sel.source === "pool")
      t.same(
        [...sel.candidates].sort(),
        ["vol-abandoned", "vol-mine", "vol-untimed"],
        "everything but the volume on its way",
      );
  },
);

t.test(
  "the snapshot lookup and the selection go by one rule: a pool whose every volume is on its way gets the " +
    "snapshot, not a degraded node",
  async (t) => {
    const now = new Date("2026-12-01T12:00:00Z");
    const base = volume("x").tags;
    // What a boot saw on the fleet: the pool's only volumes were between a release's detach and its tags.
    const releasing = [1, 2].map((n) =>
      volume(`vol-releasing-${n}`, {
        tags: { ...base, [VolumeTag.claimedBy]: "i-other", [VolumeTag.claimedAt]: "2026-12-01T11:58:00Z" },
      }),
    );
    const seen = observed({ now, pool: releasing });
    const needed = lookupsNeeded(settings, seen, "snapshot");
    t.ok(needed, "volumes on their way are no candidates: the boot looks the snapshot up");
    const plan = planBoot(settings, needed ? { ...seen, snapshot } : seen);
    t.equal(plan.selection.source, "snapshot", "and makes a volume from it", { selection: plan.selection });

    // Every reason a listed volume is no candidate: the lookup and the selection agree on each.
    const unusable: Record<string, VolumeInfo> = {
      "on its way": releasing[0]!,
      quarantined: volume("vol-q", {
        tags: { ...base, [VolumeTag.lastError]: "bad", [VolumeTag.lastErrorAt]: "2026-12-01T11:00:00Z" },
      }),
      "in another zone": volume("vol-z", { availabilityZone: "eu-west-1b" }),
      "no longer available": volume("vol-u", {
        state: "in-use",
        attachment: { instanceId: "i-other", device: "/dev/sdf", state: "attached" },
      }),
      "of the other image store": volume("vol-c", { tags: { ...base, [VolumeTag.imageStore]: "containerd" } }),
    };
    for (const [why, v] of Object.entries(unusable)) {
      const one = observed({ now, pool: [v] });
      t.equal(selectSource({ ...settings, createFromSnapshot: false }, one).source, "none", `${why}: no candidate`);
      t.ok(lookupsNeeded(settings, one, "snapshot"), `${why}: so the snapshot is looked up`);
    }
    t.notOk(
      lookupsNeeded(settings, observed({ now, pool: [...releasing, volume("vol-free")] }), "snapshot"),
      "one free volume among them: no snapshot lookup",
    );
  },
);

t.test(
  "lookups: a pool boot asks only for the pool page; the snapshot only when the pool has nothing usable",
  async (t) => {
    const base = observed();
    t.notOk(lookupsNeeded(settings, base, "workspace"), "no ids: no workspace lookup");
    t.ok(lookupsNeeded(settings, base, "pool"));
    t.notOk(
      lookupsNeeded(settings, { ...base, pool: [volume("vol-1")] }, "snapshot"),
      "candidates: no snapshot lookup",
    );
    t.ok(lookupsNeeded(settings, base, "snapshot"), "empty pool: the snapshot");
    t.notOk(lookupsNeeded({ ...settings, createFromSnapshot: false }, base, "snapshot"));
    const mine = volume("vol-m", {
      state: "in-use",
      attachment: { instanceId: identity.instanceId, device: "/dev/sdf", state: "attached" },
    });
    for (const stage of ["workspace", "pool", "snapshot"] as const) {
      t.notOk(
        lookupsNeeded(
          { ...settings, workspace: { "user-id": "1", "project-id": "p", "node-id": "n" } },
          { ...base, attached: [mine] },
          stage,
        ),
        `attached: no ${stage} lookup`,
      );
      t.notOk(lookupsNeeded({ ...settings, mayClaim: false }, base, stage), `--no-claim: no ${stage} lookup`);
    }
    const ws = { ...settings, workspace: { "user-id": "1", "project-id": "p", "node-id": "n" } };
    t.ok(lookupsNeeded(ws, base, "workspace"));
    t.notOk(
      lookupsNeeded(ws, { ...base, workspace: [workspaceVolume("vol-w", ws.workspace)] }, "pool"),
      "a workspace volume: no pool lookup",
    );
    t.ok(
      lookupsNeeded(ws, { ...base, workspace: [workspaceVolume("vol-w", { "user-id": "1" })] }, "pool"),
      "a volume of another level is no workspace volume of these ids",
    );
    t.ok(lookupsNeeded(ws, base, "snapshot"), "no workspace volume and an empty pool: the snapshot makes one");
  },
);

t.test("empty pool: snapshot; no snapshot: none; snapshot off: none", async (t) => {
  t.equal(selectSource(settings, observed({ snapshot })).source, "snapshot");
  t.equal(selectSource(settings, observed()).source, "none");
  t.equal(selectSource({ ...settings, createFromSnapshot: false }, observed({ snapshot })).source, "none");
  t.equal(
    selectSource(settings, observed({ snapshot: { ...snapshot, state: "pending" } })).source,
    "none",
    "a pending snapshot is not used",
  );
  const plan = planBoot(settings, observed());
  t.same(
    plan.steps.map((s) => s.step),
    ["degrade"],
  );
});

t.test("candidate order differs between instances and is stable for one", async (t) => {
  const ids = Array.from({ length: 20 }, (_, i) => `vol-${i.toString(16).padStart(17, "0")}`);
  const a1 = orderCandidates("i-0001", ids);
  t.same(orderCandidates("i-0001", [...ids].reverse()), a1, "same instance, same order whatever the input order");
  const firsts = new Set(Array.from({ length: 30 }, (_, i) => orderCandidates(`i-${i}`, ids)[0]));
  t.ok(firsts.size >= 5, `30 instances start on ${firsts.size} different volumes`);
  t.same([...a1].sort(), [...ids].sort(), "a permutation");
});

const GRAPHDRIVER = { store: "graphdriver" } as const;

t.test("initialized volumes are tried first, each group in the instance's order", async (t) => {
  const ids = Array.from({ length: 12 }, (_, i) => `vol-${i.toString(16).padStart(17, "0")}`);
  const warm = new Set([ids[3]!, ids[7]!, ids[10]!]);
  const volumes = ids.map((id) =>
    volume(
      id,
      warm.has(id)
        ? {
            tags: {
              [VolumeTag.kind]: "pool",
              [VolumeTag.pool]: "p1",
              [VolumeTag.initialized]: "2026-01-01T00:00:00.000Z",
            },
          }
        : {},
    ),
  );
  for (const instanceId of ["i-0001", "i-0002", "i-0003"]) {
    const order = candidateOrder(instanceId, volumes, GRAPHDRIVER).fitting;
    t.same(new Set(order.slice(0, 3)), warm, `${instanceId}: the initialized volumes come first`);
    t.same(order.slice(0, 3), orderCandidates(instanceId, [...warm]), "in the instance's order");
    t.same(
      order.slice(3),
      orderCandidates(
        instanceId,
        ids.filter((id) => !warm.has(id)),
      ),
      "then the others, in the instance's order",
    );
  }
  const selection = selectSource(settings, observed({ pool: volumes, snapshot }));
  t.ok(
    selection.source === "pool" && warm.has(selection.candidates[0]!),
    "the boot's first candidate is an initialized volume",
  );
  t.same(
    candidateOrder(
      "i-0001",
      volumes.filter((v) => !warm.has(v.volumeId)),
      GRAPHDRIVER,
    ).fitting,
    orderCandidates(
      "i-0001",
      ids.filter((id) => !warm.has(id)),
    ),
    "none initialized: the order is unchanged",
  );
  // A volume of the containerd store is set apart even when initialized; the rest keep their order.
  const other = volume(ids[3]!, {
    tags: {
      [VolumeTag.kind]: "pool",
      [VolumeTag.pool]: "p1",
      [VolumeTag.initialized]: "2026-01-01T00:00:00.000Z",
      [VolumeTag.imageStore]: "containerd",
    },
  });
  const mixed = candidateOrder(
    "i-0001",
    volumes.map((v) => (v.volumeId === ids[3] ? other : v)),
    GRAPHDRIVER,
  );
  t.same(
    mixed.mismatched.map((m) => m.volume),
    [ids[3]],
    "the other store's volume is no candidate",
  );
  t.same(
    mixed.fitting.slice(0, 2),
    orderCandidates("i-0001", [ids[7]!, ids[10]!]),
    "the other initialized volumes still come first",
  );
});

t.test("the newest generation is tried first; a superseded one only after it, still before the snapshot", async (t) => {
  const ids = Array.from({ length: 12 }, (_, i) => `vol-${i.toString(16).padStart(17, "0")}`);
  const tagsOf = (i: number): Record<string, string> => {
    const tags: Record<string, string> = { [VolumeTag.kind]: "pool", [VolumeTag.pool]: "p1" };
    // 0-3: the new generation, 4-7: the old one, 8-11: no built-at (made before generations: the oldest).
    if (i < 4) tags[VolumeTag.builtAt] = "2026-11-01T00:00:00Z";
    else if (i < 8) tags[VolumeTag.builtAt] = "2026-10-01T00:00:00Z";
    // An initialized volume of the old generation does not jump ahead of the new one.
    if (i === 5 || i === 2) tags[VolumeTag.initialized] = "2026-10-02T00:00:00Z";
    return tags;
  };
  const volumes = ids.map((id, i) => volume(id, { tags: tagsOf(i) }));
  for (const instanceId of ["i-0001", "i-0002"]) {
    const order = candidateOrder(instanceId, [...volumes].reverse(), GRAPHDRIVER).fitting;
    t.same(
      order.slice(0, 4),
      [ids[2]!, ...orderCandidates(instanceId, [ids[0]!, ids[1]!, ids[3]!])],
      `${instanceId}: the new generation first, initialized first within it`,
    );
    t.same(
      order.slice(4, 8),
      [ids[5]!, ...orderCandidates(instanceId, [ids[4]!, ids[6]!, ids[7]!])],
      "then the old generation",
    );
    t.same(order.slice(8), orderCandidates(instanceId, ids.slice(8)), "then the volumes of unknown generation");
  }
  t.not(
    candidateOrder("i-0001", volumes, GRAPHDRIVER).fitting[1],
    candidateOrder("i-0002", volumes, GRAPHDRIVER).fitting[1],
    "instances still spread inside a generation",
  );
  const old = volumes.slice(4);
  const selection = selectSource(settings, observed({ pool: old, snapshot }));
  t.ok(
    selection.source === "pool" && selection.candidates.length === 8,
    "no current volume listed: the superseded ones are claimed, not a new one from the snapshot",
  );
  t.same(
    candidateOrder(
      "i-0001",
      ids.slice(8).map((id) => volume(id)),
      GRAPHDRIVER,
    ).fitting,
    orderCandidates("i-0001", ids.slice(8)),
    "a pool without built-at tags keeps today's order",
  );
});

t.test("the plan is serializable (shown by --dry-run)", async (t) => {
  const plan = planBoot(settings, observed({ pool: [volume("vol-1")], snapshot }));
  t.same(JSON.parse(JSON.stringify(plan)), plan);
  t.same(
    plan.steps.map((s) => s.step),
    [
      "claim-volume",
      "tag-claim",
      "wait-for-device",
      "check-filesystem",
      "mount",
      "grow-filesystem",
      "prepare-data-root",
      "switch-data-root",
      "start-docker",
      "verify-docker",
      "prewarm",
      "report-ready",
    ],
  );
});

t.test("without docker (first boot phase): no docker steps and no readiness report", async (t) => {
  const plan = planBoot({ ...settings, withDocker: false }, observed({ pool: [volume("vol-1")], snapshot }));
  const steps = plan.steps.map((s) => s.step);
  t.equal(steps.at(-1), "switch-data-root", "ends once daemon.json points at the volume");
  t.notOk(steps.includes("report-ready"), "ready is never reported before docker is verified");
  t.notOk(steps.includes("start-docker"));
});

t.test("the first phase begins the pre-warm run at the mount; the second and a single phase do not", async (t) => {
  const seen = { pool: [volume("vol-1")], snapshot };
  const first = planBoot({ ...settings, withDocker: false, prewarm: "check" }, observed(seen));
  const steps = first.steps.map((s) => s.step);
  t.equal(steps[steps.indexOf("mount") + 1], "begin-prewarm", "right after the mount, before the data-root's steps");
  t.match(
    first.steps.find((s) => s.step === "begin-prewarm"),
    { strategy: "check" },
    "with the strategy phase 2 will take",
  );
  const off = planBoot({ ...settings, withDocker: false, prewarm: "off" }, observed(seen));
  t.notOk(
    off.steps.some((s) => s.step === "begin-prewarm"),
    "prewarm.strategy off: none",
  );
  for (const [name, over] of [
    ["single phase", {}],
    ["second phase", { mayClaim: false }],
  ] as const) {
    const plan = planBoot({ ...settings, ...over, prewarm: "check" }, observed(seen));
    t.notOk(
      plan.steps.some((s) => s.step === "begin-prewarm"),
      `${name}: none (its own pre-warm begins at the mount, or takes the first phase's over)`,
    );
  }
});

t.test(
  "workspace.requireEncrypted: a workspace volume EBS does not encrypt is never attached, the node degrades with " +
    "the reason",
  async (t) => {
    const ids = { "user-id": "7", "project-id": "p-1", "node-id": "n-1" };
    const strict = { ...settings, workspace: ids, requireEncryptedWorkspace: true };
    const pool = [volume("vol-1")];
    const plain = workspaceVolume("vol-plain", ids, { encrypted: false });
    const sealed = workspaceVolume("vol-sealed", ids, {
      encrypted: true,
      kmsKeyId: "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    });

    const refused = planBoot(strict, observed({ workspace: [plain], pool, snapshot }));
    t.same(
      refused.steps.map((s) => s.step),
      ["degrade"],
      "degraded: no claim, no new workspace volume, no pool volume",
    );
    t.match(refused.selection, {
      source: "none",
      reason: new RegExp(
        String.raw`the workspace volume vol-plain of these ids is not encrypted ` +
          String.raw`and workspace\.requireEncrypted is set: not attached`,
      ),
    });

    const taken = planBoot(strict, observed({ workspace: [plain, sealed], pool, snapshot }));
    t.match(
      taken.selection,
      { source: "workspace", candidates: ["vol-sealed"] },
      "the encrypted one is the only candidate",
    );
    t.match(
      taken.steps[0],
      { step: "claim-volume", requireEncrypted: true },
      "and a fresh page after a loss is filtered the same way",
    );

    t.equal(
      selectSource({ ...strict, requireEncryptedWorkspace: false }, observed({ workspace: [plain], pool })).source,
      "workspace",
      "without the switch it is attached",
    );
    t.equal(
      selectSource(strict, observed({ workspace: [workspaceVolume("vol-unknown", ids)], pool })).source,
      "none",
      "not known to be encrypted: refused",
    );

    const attached = workspaceVolume("vol-att", ids, {
      state: "in-use",
      encrypted: false,
      attachment: { instanceId: "i-0aaa", device: "/dev/sdf", state: "attached" },
    });
    t.match(
      selectSource(strict, observed({ attached: [attached] })),
      { source: "none", reason: /vol-att attached here is not encrypted/ },
      "attached at a reboot: not mounted either",
    );
    const poolAttached = volume("vol-pool", {
      state: "in-use",
      encrypted: false,
      attachment: { instanceId: "i-0aaa", device: "/dev/sdf", state: "attached" },
    });
    t.equal(
      selectSource(strict, observed({ attached: [poolAttached] })).source,
      "attached",
      "a pool volume is not a workspace: the switch is about workspaces",
    );
  },
);

t.test(
  "no workspace volume for the ids: a pool volume becomes it " +
    "(the snapshot only for an empty pool; blank; never: the pool)",
  async (t) => {
    const ids = { "user-id": "7", "project-id": "p-1", "node-id": "n-1" };
    const ws = { ...settings, workspace: ids };
    const pool = [volume("vol-1"), volume("vol-2", { tags: { ...volume("x").tags, [VolumeTag.initialized]: "t" } })];

    const adopted = planBoot(ws, observed({ pool, snapshot }));
    const sel = adopted.selection;
    if (sel.source !== "new-workspace" || sel.from !== "pool")
      return t.fail(`expected a new workspace from the pool, got ${JSON.stringify(sel)}`);
    t.equal(sel.candidates[0], "vol-2", "the pool's order: an initialized volume first");
    t.same(
      adopted.steps.map((s) => s.step).slice(0, 9),
      [
        "claim-volume",
        "tag-claim",
        "wait-for-device",
        "check-filesystem",
        "mount",
        "grow-filesystem",
        "prepare-data-root",
        "adopt-workspace",
        "switch-data-root",
      ],
      "claimed as a pool volume, cleaned as one, adopted before docker starts on it",
    );
    const adopt = adopted.steps.find((s) => s.step === "adopt-workspace");
    t.same(
      adopt?.step === "adopt-workspace" ? [adopt.adopt.set, adopt.adopt.remove, adopt.intent] : [],
      [
        {
          [VolumeTag.kind]: "workspace",
          [VolumeTag.userId]: "7",
          [VolumeTag.projectId]: "p-1",
          [VolumeTag.nodeId]: "n-1",
          [VolumeTag.workspaceKeys]: "user-id,project-id,node-id",
        },
        [VolumeTag.images],
        settings.intent,
      ],
      "tagged workspace with the ids and the keys they are for; its image list dropped; the intent a workspace's",
    );
    t.ok(sel.fallback, "the pool's snapshot stays the fallback should every candidate be taken");
    t.notOk(lookupsNeeded(ws, observed({ pool }), "snapshot"), "stock in the pool: no snapshot lookup");

    const empty = planBoot(ws, observed({ snapshot }));
    const fromSnapshot = empty.selection;
    if (fromSnapshot.source !== "new-workspace" || fromSnapshot.from !== "snapshot")
      return t.fail(`expected a new workspace from the snapshot, got ${JSON.stringify(fromSnapshot)}`);
    t.equal(fromSnapshot.create.snapshotId, "snap-1", "an empty pool: made from the pool's snapshot");
    t.equal(fromSnapshot.create.tags[VolumeTag.kind], "pool", "made as a pool volume, adopted after preparation");
    t.ok(
      empty.steps.some((s) => s.step === "adopt-workspace"),
      "and adopted like one from the stock",
    );
    t.ok(lookupsNeeded(ws, observed(), "snapshot"), "an empty pool: the snapshot is looked up");
    t.equal(
      selectSource({ ...ws, createFromSnapshot: false }, observed({ snapshot })).source,
      "new-workspace",
      "createFromSnapshot is about pool volumes",
    );

    const blank = selectSource({ ...ws, workspaceCreate: "blank", workspaceSizeGiB: 30 }, observed({ pool }));
    if (blank.source !== "new-workspace" || blank.from !== "blank") return t.fail("blank: a blank workspace volume");
    t.equal(blank.create.snapshotId, undefined, "blank: no snapshot");
    t.equal(blank.create.sizeGiB, 30, "blank: workspace.sizeGiB");
    t.equal(
      blank.create.tags[VolumeTag.createdBy],
      "agent",
      "blank: created-by=agent, the only volumes the agent formats",
    );
    t.equal(blank.create.tags[VolumeTag.kind], "workspace");
    t.equal(blank.create.tags[VolumeTag.nodeId], "n-1");

    const never = planBoot({ ...ws, workspaceCreate: "never" }, observed({ pool, snapshot }));
    t.equal(never.selection.source, "pool", "never: the pool, as without ids");
    t.notOk(
      never.steps.some((s) => s.step === "adopt-workspace"),
      "never: nothing adopted",
    );
    t.equal(
      selectSource(ws, observed({ pool: [], snapshot: { ...snapshot, state: "pending" } })).source,
      "none",
      "an empty pool and a pending snapshot make no workspace",
    );

    const existing = workspaceVolume("vol-ws", ids);
    t.equal(
      selectSource(ws, observed({ workspace: [existing], pool })).source,
      "workspace",
      "an existing workspace volume is taken, not a new one",
    );
    const mine = volume("vol-9", {
      state: "in-use",
      attachment: { instanceId: "i-0aaa", device: "/dev/sdf", state: "attached" },
    });
    t.equal(
      selectSource(ws, observed({ attached: [mine], snapshot })).source,
      "attached",
      "an attached volume still comes first",
    );
    t.equal(selectSource(settings, observed({ pool, snapshot })).source, "pool", "without ids nothing changes");
  },
);

t.test("at most one workspace per ids: one held by another instance makes this boot a plain pool node", async (t) => {
  const ids = { "user-id": "7", "project-id": "p-1", "node-id": "n-1" };
  const ws = { ...settings, workspace: ids };
  const pool = [volume("vol-1")];
  const held = workspaceVolume("vol-ws", ids, {
    state: "in-use",
    attachment: { instanceId: "i-0bbb", device: "/dev/sdf", state: "attached" },
  });
  const plan = planBoot(ws, observed({ workspace: [held], pool, snapshot }));
  t.equal(plan.selection.source, "pool", "the pool, not a second workspace");
  t.notOk(
    plan.steps.some((s) => s.step === "adopt-workspace"),
    "nothing adopted",
  );
  const claim = plan.steps[0];
  t.match(
    claim?.step === "claim-volume" ? claim.note : "",
    new RegExp(
      String.raw`the workspace of user-id=7 project-id=p-1 node-id=n-1 \(vol-ws\) is held by i-0bbb: ` +
        "this node runs on a pool volume as a plain node",
    ),
    "and says so before the claim",
  );
  t.equal(
    selectSource(ws, observed({ workspace: [held], snapshot })).source,
    "snapshot",
    "an empty pool: a pool volume from the snapshot, still no workspace",
  );
  t.equal(
    selectSource({ ...ws, workspaceCreate: "blank" }, observed({ workspace: [held], pool })).source,
    "pool",
    "blank: no second blank workspace either",
  );
  const quarantined = workspaceVolume("vol-q", ids, {
    state: "in-use",
    attachment: { instanceId: "i-0bbb", device: "/dev/sdf", state: "attached" },
    tags: { ...held.tags, [VolumeTag.lastError]: "broken", [VolumeTag.lastErrorAt]: "2099-01-01T00:00:00.000Z" },
  });
  t.equal(
    selectSource(ws, observed({ workspace: [quarantined], pool, now: new Date("2099-01-01T01:00:00Z") })).source,
    "new-workspace",
    "a quarantined workspace serves nobody: a new one is made",
  );
  const otherLevel = workspaceVolume("vol-u", { "user-id": "7" }, { state: "in-use", attachment: held.attachment! });
  t.equal(
    selectSource(ws, observed({ workspace: [otherLevel], pool })).source,
    "new-workspace",
    "the user's user-level workspace is another workspace",
  );
  t.same(
    workspaceQuery(ids, "eu-west-1a").status,
    ["available"],
    "claims are of available volumes; observe lists every state",
  );
});

t.test("the second boot phase (--no-claim) reuses an attached volume and never claims", async (t) => {
  const noClaim = { ...settings, mayClaim: false };
  const none = selectSource(noClaim, observed({ pool: [volume("vol-1")], snapshot }));
  t.equal(none.source, "none", "nothing attached: degraded, the pool is not touched");
  const mine = volume("vol-9", {
    state: "in-use",
    attachment: { instanceId: "i-0aaa", device: "/dev/sdf", state: "attached" },
  });
  t.equal(selectSource(noClaim, observed({ attached: [mine], pool: [volume("vol-1")] })).source, "attached");
});

t.test(
  "a workspace volume serves exactly its keys: a user-level one never a project's node, and the reverse",
  async (t) => {
    const userLevel = workspaceVolume("vol-user", { "user-id": "42" });
    const projectLevel = workspaceVolume("vol-project", { "user-id": "42", "project-id": "p-1" });
    const otherProject = workspaceVolume("vol-other", { "user-id": "42", "project-id": "p-2" });
    const otherUser = workspaceVolume("vol-43", { "user-id": "43" });
    // observe() lists by workspaceQuery; the planner checks again, so even a listing that held
    // every workspace volume could only ever give an exact match.
    const all = [userLevel, projectLevel, otherProject, otherUser];
    const pick = (ids: WorkspaceIds) => {
      const sel = selectSource(
        { ...settings, workspace: ids, workspaceCreate: "never" },
        observed({ workspace: all, pool: [volume("vol-1")] }),
      );
      return sel.source === "workspace" ? sel.candidates : sel.source;
    };
    t.same(pick({ "user-id": "42" }), ["vol-user"], "user-level request: the user-level volume only");
    t.same(
      pick({ "user-id": "42", "project-id": "p-1" }),
      ["vol-project"],
      "project-level request: that project's volume only",
    );
    t.same(
      pick({ "user-id": "42", "project-id": "p-3" }),
      "pool",
      "a project with no volume yet: not the user's volume, the pool",
    );
    t.same(pick({ "user-id": "44" }), "pool", "another user: the pool");
    t.same(pick({ "user-id": "42", "node-id": "n" }), "pool", "same user-id, other keys: the pool");

    const q = workspaceQuery({ "user-id": "42" }, "eu-west-1a");
    t.same(
      q.tags,
      {
        [VolumeTag.managed]: "true",
        [VolumeTag.kind]: "workspace",
        [VolumeTag.userId]: "42",
        [VolumeTag.workspaceKeys]: "user-id",
      },
      "EC2 filters on every id present and the keys tag",
    );
    t.same(
      workspaceQuery({ "node-id": "n", "product-name": "osparc", "user-id": "42" }, "z").tags[VolumeTag.workspaceKeys],
      "product-name,user-id,node-id",
      "the keys in a fixed order, whatever order the labels had",
    );

    const legacy = volume("vol-legacy", {
      tags: { [VolumeTag.managed]: "true", [VolumeTag.kind]: "workspace", [VolumeTag.userId]: "42" },
    });
    t.same(
      selectSource(
        { ...settings, workspace: { "user-id": "42" }, workspaceCreate: "never" },
        observed({ workspace: [legacy], pool: [] }),
      ).source,
      "none",
      "a volume without the keys tag is not taken on a guess",
    );
    const stray = workspaceVolume("vol-stray", { "user-id": "42" }, {});
    stray.tags[VolumeTag.projectId] = "p-1";
    t.same(
      selectSource(
        { ...settings, workspace: { "user-id": "42" }, workspaceCreate: "never" },
        observed({ workspace: [stray], pool: [] }),
      ).source,
      "none",
      "an id tag the keys tag does not name makes the level ambiguous: not taken",
    );

    const made = planBoot({ ...settings, workspace: { "user-id": "user_42" } }, observed({ snapshot }));
    const adoption = made.steps.find((s) => s.step === "adopt-workspace");
    t.same(
      Object.fromEntries(
        Object.entries(adoption?.step === "adopt-workspace" ? adoption.adopt.set : {}).filter(([k]) =>
          [VolumeTag.userId, VolumeTag.projectId, VolumeTag.nodeId, VolumeTag.workspaceKeys].includes(k as never),
        ),
      ),
      { [VolumeTag.userId]: "user_42", [VolumeTag.workspaceKeys]: "user-id" },
      "a new user-level volume records only user-id, and says so",
    );
    t.same(
      workspaceIdsOfVolume(adoption?.step === "adopt-workspace" ? adoption.adopt.set : {}),
      { "user-id": "user_42" },
      "the ids read back from the volume's tags (phase 2, labels)",
    );
    t.same(workspaceIdsOfVolume(workspaceIdTags({ "node-id": "n", "wallet-id": "w" })), {
      "wallet-id": "w",
      "node-id": "n",
    });
    t.equal(workspaceIdsOfVolume(legacy.tags), undefined, "no keys tag: no ids read back");
    t.equal(
      workspaceIdsOfVolume({ ...workspaceIdTags({ "user-id": "1" }), [VolumeTag.userId]: "a b" }),
      undefined,
      "a bad value on the volume: none",
    );
    t.equal(
      workspaceIdsOfVolume({ [VolumeTag.workspaceKeys]: "user-id,group-id", [VolumeTag.userId]: "1" }),
      undefined,
      "an unknown key: none",
    );
  },
);

t.test(
  "an attached workspace volume is mounted only for the ids this run has: else handed back, then the pool (a " +
    "warm buffer started for another tenant)",
  async (t) => {
    const theirs = volume("vol-a", {
      state: "in-use",
      attachment: { instanceId: identity.instanceId, device: "/dev/sdf", state: "attached" },
      tags: {
        [VolumeTag.kind]: "workspace",
        [VolumeTag.pool]: "p1",
        [VolumeTag.workspaceKeys]: "user-id",
        [VolumeTag.userId]: "alice",
      },
    });
    const pool = [volume("vol-1")];
    const bob = planBoot(
      { ...settings, workspace: { "user-id": "bob" }, workspaceCreate: "never", intent: { keep: false, ttlHours: 48 } },
      observed({ attached: [theirs], pool }),
    );
    t.match(
      bob.steps[0],
      { step: "hand-back-attached", volumeId: "vol-a", keep: false, ttlHours: 48, reason: /made for other ids/ },
      "another user's: handed back first",
    );
    t.match(bob.selection, { source: "pool", candidates: ["vol-1"] }, "then the pool, as if nothing were attached");
    t.notOk(
      bob.steps.some((s) => s.step === "reuse-attached"),
      "never reused",
    );

    const none = planBoot(settings, observed({ attached: [theirs], pool }));
    t.match(
      none.steps[0],
      { step: "hand-back-attached", volumeId: "vol-a", ttlHours: 24, reason: /current tags name none/ },
      "no ids (a start with no labels): handed back too",
    );
    t.equal(none.selection.source, "pool");
    t.ok(
      lookupsNeeded(settings, observed({ attached: [theirs] }), "pool"),
      "the pool is looked up although a volume is attached",
    );

    const kept = planBoot(
      settings,
      observed({ attached: [{ ...theirs, tags: { ...theirs.tags, [VolumeTag.keep]: "true" } }], pool }),
    );
    t.match(kept.steps[0], { step: "hand-back-attached", keep: true }, "its owner's keep, as the volume carries it");
    const recorded = planBoot(
      { ...settings, workspace: { "user-id": "bob" }, intent: { keep: false, ttlHours: 48 } },
      observed({ attached: [{ ...theirs, tags: { ...theirs.tags, [VolumeTag.ttlHours]: "6" } }], pool }),
    );
    t.match(
      recorded.steps[0],
      { step: "hand-back-attached", ttlHours: 6 },
      "its owner's TTL, as its claim recorded it, not this tenant's",
    );

    const alice = planBoot({ ...settings, workspace: { "user-id": "alice" } }, observed({ attached: [theirs], pool }));
    t.same(alice.selection, { source: "attached", volumeId: "vol-a", kind: "workspace" }, "the same ids: reused");
    t.notOk(alice.steps.some((s) => s.step === "hand-back-attached"));
    t.notOk(
      lookupsNeeded({ ...settings, workspace: { "user-id": "alice" } }, observed({ attached: [theirs] }), "pool"),
      "and nothing looked up",
    );

    const phase2 = planBoot({ ...settings, mayClaim: false }, observed({ attached: [theirs] }));
    t.same(
      phase2.steps.map((s) => s.step),
      ["degrade"],
      "a run that may not claim leaves it attached, unmounted, and degrades",
    );
    t.match(phase2.selection, { source: "none", reason: /not mounted/ });

    const nothingElse = planBoot({ ...settings, createFromSnapshot: false }, observed({ attached: [theirs] }));
    t.same(
      nothingElse.steps.map((s) => s.step),
      ["hand-back-attached", "degrade"],
      "nothing to take instead: still handed back, then degraded",
    );
    const poolVolume = volume("vol-p", {
      state: "in-use",
      attachment: { instanceId: identity.instanceId, device: "/dev/sdf", state: "attached" },
    });
    t.equal(
      planBoot(settings, observed({ attached: [poolVolume] })).selection.source,
      "attached",
      "a pool volume serves anyone",
    );
  },
);

t.test("the second phase resumes what the first phase of this boot prepared, and only that volume", async (t) => {
  const mine = volume("vol-9", {
    state: "in-use",
    attachment: { instanceId: "i-0aaa", device: "/dev/sdf", state: "attached" },
  });
  const phase2 = { ...settings, mayClaim: false };
  const prepared = {
    version: 1 as const,
    bootId: "boot-1",
    instanceId: "i-0aaa",
    volumeId: "vol-9",
    device: "/dev/nvme1n1",
    mountPoint: "/var/lib/ebs-cache/vol-9",
    dataRoot: "/var/lib/ebs-cache/vol-9/docker",
    preparedAt: "2026-12-01T00:00:00Z",
  };
  const resumed = planBoot(phase2, observed({ attached: [mine], prepared }));
  t.same(
    resumed.steps.map((s) => s.step),
    [
      "reuse-attached",
      "tag-claim",
      "wait-for-device",
      "resume-prepared",
      "start-docker",
      "verify-docker",
      "prewarm",
      "report-ready",
    ],
    "identify, mount, grow, clean and switch are confirmed in one step",
  );
  t.match(
    resumed.steps.find((s) => s.step === "resume-prepared"),
    { mountRoot: "/var/lib/ebs-cache", mountPoint: prepared.mountPoint, dataRoot: prepared.dataRoot },
  );

  const full = [
    "reuse-attached",
    "tag-claim",
    "wait-for-device",
    "check-filesystem",
    "mount",
    "grow-filesystem",
    "prepare-data-root",
    "switch-data-root",
    "start-docker",
    "verify-docker",
    "prewarm",
    "report-ready",
  ];
  t.same(
    planBoot(phase2, observed({ attached: [mine] })).steps.map((s) => s.step),
    full,
    "no record: every step",
  );
  t.same(
    planBoot(phase2, observed({ attached: [mine], prepared: { ...prepared, volumeId: "vol-8" } })).steps.map(
      (s) => s.step,
    ),
    full,
    "another volume's record: every step",
  );
});

t.test("a prepared record counts only in the boot and on the instance that wrote it", async (t) => {
  const record = {
    version: 1 as const,
    bootId: "boot-1",
    instanceId: "i-0aaa",
    volumeId: "vol-9",
    device: "/dev/nvme1n1",
    mountPoint: "/m/vol-9",
    dataRoot: "/m/vol-9/docker",
    preparedAt: "",
  };
  t.equal(preparedInThisBoot(record, { bootId: "boot-1", instanceId: "i-0aaa" }), record);
  t.equal(preparedInThisBoot(record, { bootId: "boot-2", instanceId: "i-0aaa" }), undefined, "after a reboot");
  t.equal(preparedInThisBoot(record, { bootId: "boot-1", instanceId: "i-0bbb" }), undefined, "another instance's");
  t.equal(
    preparedInThisBoot(record, { bootId: undefined, instanceId: "i-0aaa" }),
    undefined,
    "no boot id: nothing vouched for",
  );
  t.equal(preparedInThisBoot(undefined, { bootId: "boot-1", instanceId: "i-0aaa" }), undefined);
});

t.test("a pool of instanceTypePools: a volume made from its snapshot is of the pool's size", async (t) => {
  const large = { ...settings, poolSizeGiB: 500 };
  const direct = selectSource(large, observed({ snapshot }));
  t.equal(direct.source === "snapshot" ? direct.create.sizeGiB : "no create", 500, "an empty pool: created at 500");
  const sel = selectSource(large, observed({ pool: [volume("vol-1")] }));
  const fallback = sel.source === "pool" ? sel.fallback : undefined;
  t.equal(createSpecFrom(fallback!, snapshot)?.sizeGiB, 500, "after losing every candidate: the same");
  const below = selectSource({ ...settings, poolSizeGiB: 5 }, observed({ snapshot }));
  t.equal(below.source, "snapshot", "a size below the snapshot's does not fail the boot");
  t.equal(below.source === "snapshot" ? below.create.sizeGiB : 0, undefined, "it takes the snapshot's size");
  const plain = selectSource(settings, observed({ snapshot }));
  t.equal(plain.source === "snapshot" ? plain.create.sizeGiB : 0, undefined, "no rule: the snapshot's size");

  const ws = { ...large, workspace: { "user-id": "7", "project-id": "p-1", "node-id": "n-1" } };
  const workspace = (over: Partial<typeof ws>) => {
    const sel = selectSource({ ...ws, ...over }, observed({ snapshot }));
    return sel.source === "new-workspace" && sel.from !== "pool" ? sel.create : undefined;
  };
  t.same(
    [workspace({})?.snapshotId, workspace({})?.sizeGiB],
    ["snap-1", 500],
    "a new workspace volume from the pool's snapshot (an empty pool): the pool's size too",
  );
  t.equal(workspace({ poolSizeGiB: 5 })?.sizeGiB, undefined, "below the snapshot's: the snapshot's");
  t.equal(
    workspace({ workspaceCreate: "blank", workspaceSizeGiB: 30 })?.sizeGiB,
    30,
    "a blank one: workspace.sizeGiB, not the rule's",
  );
});
