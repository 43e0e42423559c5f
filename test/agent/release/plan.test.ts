/** The release planner: pure, tested with plain objects. */
import t from "tap";
import type { VolumeInfo } from "../../../src/agent/ports.ts";
import {
  earlierReleaseTime,
  planRelease,
  releaseTags,
  type HeldVolume,
  type ReleaseObservation,
} from "../../../src/agent/release/plan.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { heldVolume, identity, ME, ON_CACHE, releaseSettings } from "../../fixtures/builders/release-plan.ts";

const settings = releaseSettings;

function volume(id: string, over: Partial<VolumeInfo> = {}): VolumeInfo {
  return heldVolume(id, "workspace", over);
}
const mounted = (id: string): HeldVolume => ({
  volume: volume(id),
  device: "/dev/nvme1n1",
  mountPoints: [`/var/lib/ebs-cache/${id}`],
});
const observed = (over: Partial<ReleaseObservation> = {}): ReleaseObservation => ({
  identity,
  held: [],
  untagged: [],
  daemonJson: { ok: true, dataRoot: undefined, agentLabels: [] },
  docker: { active: false },
  ...over,
});
const steps = (plan: ReturnType<typeof planRelease>) => plan.steps.map((s) => s.step);

t.test(
  "at shutdown (docker already stopped): labels off, data-root reset, sync, unmount, detach, wait, tag",
  async (t) => {
    const plan = planRelease(
      settings,
      observed({
        held: [mounted("vol-1")],
        daemonJson: { ok: true, dataRoot: ON_CACHE, agentLabels: ["io.simcore.ebs-cache.state=ready"] },
      }),
    );
    t.equal(plan.decision, "release");
    t.same(plan.volumes, ["vol-1"]);
    t.same(steps(plan), [
      "withdraw-labels",
      "reset-data-root",
      "sync",
      "unmount",
      "detach",
      "wait-detached",
      "tag-released",
    ]);
    t.same(
      plan.steps[0],
      { step: "withdraw-labels", prefix: "io.simcore.ebs-cache", node: false },
      "no docker to ask for node labels",
    );
    t.same(plan.steps[1], { step: "reset-data-root", from: ON_CACHE }, "back to docker's default (no data-root key)");
    t.same(plan.steps[3], {
      step: "unmount",
      volumeId: "vol-1",
      device: "/dev/nvme1n1",
      mountPoints: ["/var/lib/ebs-cache/vol-1"],
    });
    t.same(plan.steps[6], { step: "tag-released", volumeId: "vol-1", kind: "workspace", keep: false, ttlHours: 24 });
    t.same(JSON.parse(JSON.stringify(plan)), plan, "serializable (release --dry-run --json)");
  },
);

t.test("the lab's default data-root is not docker's: reset-data-root goes to it", async (t) => {
  const plan = planRelease(
    { ...settings, defaultDataRoot: "/lab/host/var/lib/docker" },
    observed({ held: [mounted("vol-1")], daemonJson: { ok: true, dataRoot: ON_CACHE, agentLabels: [] } }),
  );
  t.same(
    plan.steps.find((s) => s.step === "reset-data-root"),
    { step: "reset-data-root", from: ON_CACHE, to: "/lab/host/var/lib/docker" },
  );
  t.notOk(steps(plan).includes("withdraw-labels"), "no agent label in daemon.json and no docker: nothing to withdraw");
});

t.test(
  "docker still running on the volume: stopped after daemon.json is reset; refused when release.stopDocker is " +
    "false or docker is not the agent's to stop",
  async (t) => {
    const obs = observed({
      held: [mounted("vol-1")],
      daemonJson: { ok: true, dataRoot: ON_CACHE, agentLabels: [] },
      docker: { active: true, dataRoot: ON_CACHE },
    });
    const plan = planRelease(settings, obs);
    t.same(steps(plan), [
      "withdraw-labels",
      "reset-data-root",
      "stop-docker",
      "sync",
      "unmount",
      "detach",
      "wait-detached",
      "tag-released",
    ]);
    t.same(
      plan.steps[0],
      { step: "withdraw-labels", prefix: "io.simcore.ebs-cache", node: true },
      "node labels too, while docker answers",
    );

    for (const [what, s] of [
      ["release.stopDocker false", { ...settings, stopDocker: false }],
      ["docker.control none", { ...settings, controlsDocker: false }],
    ] as const) {
      const refused = planRelease(s, obs);
      t.equal(refused.decision, "refused", what);
      t.same(refused.steps, [], `${what}: no step at all`);
      t.match(refused.reason, /docker still runs on the cache volume.*nothing was changed/, `${what}: says why`);
      t.match(refused.remediation, /stop docker/);
    }
    const unknownRoot = planRelease(
      { ...settings, stopDocker: false },
      observed({ held: [mounted("vol-1")], docker: { active: true } }),
    );
    t.equal(
      unknownRoot.decision,
      "refused",
      "docker running on a root it did not tell, with the volume mounted: treated as on the volume",
    );
  },
);

t.test("docker running on another root (a degraded node) is left alone, with its labels", async (t) => {
  const degraded = planRelease(
    settings,
    observed({
      daemonJson: { ok: true, dataRoot: "/var/lib/docker", agentLabels: ["io.simcore.ebs-cache.state=degraded"] },
      docker: { active: true, dataRoot: "/var/lib/docker" },
    }),
  );
  t.equal(degraded.decision, "nothing", "nothing held, nothing on a cache volume: nothing to do");
  t.same(degraded.steps, []);
  const attachedNotMounted = planRelease(
    settings,
    observed({
      held: [{ volume: volume("vol-1"), mountPoints: [] }],
      docker: { active: true, dataRoot: "/var/lib/docker" },
    }),
  );
  t.same(
    steps(attachedNotMounted),
    ["unmount", "detach", "wait-detached", "tag-released"],
    "no stop, no labels, no sync of nothing",
  );
});

t.test("nothing attached, nothing claimed, daemon.json on its default: nothing to do (a second release)", async (t) => {
  const plan = planRelease(settings, observed({ daemonJson: { ok: true, dataRoot: undefined, agentLabels: [] } }));
  t.equal(plan.decision, "nothing");
  t.same(plan.steps, []);
  const leftover = planRelease(settings, observed({ daemonJson: { ok: true, dataRoot: ON_CACHE, agentLabels: [] } }));
  t.equal(leftover.decision, "release", "a data-root still on a cache mount point is reset even with no volume");
  t.same(steps(leftover), ["reset-data-root"]);
});

t.test("disabled: nothing, whatever is attached (a warning names it)", async (t) => {
  const plan = planRelease(
    { ...settings, enabled: false },
    observed({
      held: [mounted("vol-1")],
      daemonJson: { ok: true, dataRoot: ON_CACHE, agentLabels: [] },
      docker: { active: true, dataRoot: ON_CACHE },
    }),
  );
  t.equal(plan.decision, "disabled");
  t.same(plan.steps, []);
  t.match(plan.warnings.join("\n"), /vol-1 stays attached/);
  t.same(planRelease({ ...settings, enabled: false }, observed()).warnings, [], "no warning with nothing attached");
});

t.test(
  "a release killed between detach and tagging: the volume is available, still claimed-by this instance: only the tags",
  async (t) => {
    const untagged = volume("vol-2", { state: "available" });
    delete untagged.attachment;
    const plan = planRelease(settings, observed({ untagged: [untagged] }));
    t.equal(plan.decision, "release");
    t.same(plan.steps, [{ step: "tag-released", volumeId: "vol-2", kind: "workspace", keep: false, ttlHours: 24 }]);

    const tagsWritten = { ...untagged, tags: { ...untagged.tags, [VolumeTag.releasedAt]: "2030-01-02T00:00:00.000Z" } };
    t.same(
      planRelease(settings, observed({ untagged: [tagsWritten] })).steps[0],
      {
        step: "tag-released",
        volumeId: "vol-2",
        kind: "workspace",
        keep: false,
        ttlHours: 24,
        releasedAt: "2030-01-02T00:00:00.000Z",
      },
      "killed between the tags and the claim removal: the time already written is kept (same end state)",
    );
    const stale = { ...untagged, tags: { ...untagged.tags, [VolumeTag.releasedAt]: "2029-12-31T00:00:00.000Z" } };
    t.notOk(
      "releasedAt" in (planRelease(settings, observed({ untagged: [stale] })).steps[0] ?? {}),
      "a released-at older than the claim is a previous tenancy's: a new time",
    );

    const detaching = volume("vol-3", { attachment: { instanceId: ME, device: "/dev/sdf", state: "detaching" } });
    t.same(
      steps(planRelease(settings, observed({ held: [{ volume: detaching, mountPoints: [] }] }))),
      ["wait-detached", "tag-released"],
      "a detach under way: wait for it, then tag",
    );
  },
);

t.test(
  "labels mode off: labels untouched; daemon.json unreadable: left alone with a warning, the volume still released",
  async (t) => {
    const off = planRelease(
      { ...settings, labels: { prefix: "p", mode: "off" } },
      observed({
        held: [mounted("vol-1")],
        daemonJson: { ok: true, dataRoot: ON_CACHE, agentLabels: ["p.state=ready"] },
      }),
    );
    t.notOk(steps(off).includes("withdraw-labels"));
    const broken = planRelease(
      settings,
      observed({ held: [mounted("vol-1")], daemonJson: { ok: false, problem: "daemon.json is not valid JSON" } }),
    );
    t.same(steps(broken), ["sync", "unmount", "detach", "wait-detached", "tag-released"]);
    t.match(broken.warnings.join("\n"), /daemon.json is left alone: daemon.json is not valid JSON/);
  },
);

t.test(
  "several volumes: each its own steps, in volume-id order; mount points of another place are unmounted too",
  async (t) => {
    const bound: HeldVolume = {
      volume: volume("vol-a"),
      device: "/dev/nvme2n1",
      mountPoints: ["/mnt/elsewhere", "/var/lib/ebs-cache/vol-a"],
    };
    const plan = planRelease(settings, observed({ held: [mounted("vol-b"), bound] }));
    t.same(plan.volumes, ["vol-a", "vol-b"]);
    t.same(
      plan.steps.filter((s) => s.step === "unmount"),
      [
        {
          step: "unmount",
          volumeId: "vol-a",
          device: "/dev/nvme2n1",
          mountPoints: ["/mnt/elsewhere", "/var/lib/ebs-cache/vol-a"],
        },
        { step: "unmount", volumeId: "vol-b", device: "/dev/nvme1n1", mountPoints: ["/var/lib/ebs-cache/vol-b"] },
      ],
    );
  },
);

t.test("release tags: TTL or keep; the claim removed only while it names this instance", async (t) => {
  const releasedAt = new Date("2030-01-01T12:00:00.000Z");
  const ttl = releaseTags({
    instanceId: ME,
    kind: "workspace",
    keep: false,
    ttlHours: 36,
    releasedAt,
    claimedAt: "2030-01-01T10:00:00.000Z",
  });
  t.same(
    ttl.set,
    { [VolumeTag.releasedAt]: "2030-01-01T12:00:00.000Z", [VolumeTag.expiresAt]: "2030-01-03T00:00:00.000Z" },
    "expires-at = released-at + 36 h, ISO 8601",
  );
  t.same(
    ttl.remove,
    { [VolumeTag.claimedBy]: ME, [VolumeTag.claimedAt]: "2030-01-01T10:00:00.000Z" },
    "conditional on the values",
  );
  t.same(ttl.removeKeys, []);
  const kept = releaseTags({ instanceId: ME, kind: "workspace", keep: true, ttlHours: 36, releasedAt });
  t.same(
    kept.set,
    { [VolumeTag.releasedAt]: "2030-01-01T12:00:00.000Z", [VolumeTag.keep]: "true" },
    "keep: keep=true and no expires-at",
  );
  t.same(kept.removeKeys, [VolumeTag.expiresAt], "an older expires-at goes");
  t.same(kept.remove, { [VolumeTag.claimedBy]: ME });
  const pool = releaseTags({ instanceId: ME, kind: "pool", keep: true, ttlHours: 1, releasedAt });
  t.equal(
    pool.set[VolumeTag.expiresAt],
    "2030-01-01T13:00:00.000Z",
    "keep is for workspace volumes: a pool volume still expires",
  );
  t.notOk(VolumeTag.keep in pool.set);
});

t.test("earlierReleaseTime: only a released-at of the current claim counts", async (t) => {
  const v = (tags: Record<string, string>) => volume("vol-1", { tags });
  t.equal(earlierReleaseTime(v({})), undefined);
  t.equal(
    earlierReleaseTime(v({ [VolumeTag.releasedAt]: "2030-01-02T00:00:00.000Z" })),
    "2030-01-02T00:00:00.000Z",
    "no claim time: taken",
  );
  t.equal(earlierReleaseTime(v({ [VolumeTag.releasedAt]: "garbage" })), undefined, "malformed: a new time");
  t.equal(
    earlierReleaseTime(
      v({ [VolumeTag.releasedAt]: "2030-01-01T00:00:00.000Z", [VolumeTag.claimedAt]: "2030-01-01T01:00:00.000Z" }),
    ),
    undefined,
  );
});

t.test(
  "the labels rewritten for another task: no keep on this user's workspace, one warning, the claim's keep as it was",
  async (t) => {
    const ofA = (over: Record<string, string> = {}) =>
      volume("vol-1", {
        tags: { ...volume("vol-1").tags, [VolumeTag.userId]: "A", [VolumeTag.workspaceKeys]: "user-id", ...over },
      });
    const otherTask = {
      ...settings,
      keep: { by: "labels" as const, keep: true, ids: { "user-id": "B" }, origin: "instance tag labels" },
    };
    const plan = planRelease(otherTask, observed({ held: [{ volume: ofA(), mountPoints: [] }] }));
    t.same(plan.steps.at(-1), {
      step: "tag-released",
      volumeId: "vol-1",
      kind: "workspace",
      keep: false,
      ttlHours: 24,
    });
    t.equal(plan.warnings.length, 1, "one warning");
    t.match(plan.warnings[0], /vol-1 is the workspace of user-id=A, and the labels .* name user-id=B/);
    const claimedKeep = planRelease(
      { ...otherTask, keep: { ...otherTask.keep, keep: false } },
      observed({ held: [{ volume: ofA({ [VolumeTag.keep]: "true", [VolumeTag.keepBy]: ME }), mountPoints: [] }] }),
    );
    t.match(
      claimedKeep.steps.at(-1),
      { step: "tag-released", keep: true },
      "A's own keep is not withdrawn by B's labels",
    );
    const own = planRelease(
      { ...otherTask, keep: { ...otherTask.keep, ids: { "user-id": "A" } } },
      observed({ held: [{ volume: ofA(), mountPoints: [] }] }),
    );
    t.match(own.steps.at(-1), { step: "tag-released", keep: true }, "the labels of A's own ids: kept");
    t.same(own.warnings, []);
  },
);
