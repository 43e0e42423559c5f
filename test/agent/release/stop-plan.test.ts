/**
 * Stop is not terminate, in the pure parts: which fate the release reads from the instance's
 * state and the spot notice, and the plan it makes for each (a stop keeps the volume attached,
 * unexpired; a terminate or an unknown fate releases fully, as before).
 */
import t from "tap";
import { rebootQueuedIn } from "../../../src/host/reboot.ts";
import type { VolumeInfo } from "../../../src/agent/ports.ts";
import {
  instanceFate,
  planRelease,
  type HeldVolume,
  type ReleaseObservation,
  type ShutdownObservation,
} from "../../../src/agent/release/plan.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { heldVolume, identity, ME, ON_CACHE, releaseSettings } from "../../fixtures/builders/release-plan.ts";

const settings = releaseSettings;

function volume(id: string, over: Partial<VolumeInfo> = {}): VolumeInfo {
  return heldVolume(id, "pool", over);
}
const mounted = (v: VolumeInfo): HeldVolume => ({
  volume: v,
  device: "/dev/nvme1n1",
  mountPoints: [`/var/lib/ebs-cache/${v.volumeId}`],
});
const state = (name: string): ShutdownObservation["instanceState"] => ({ ok: true, state: name });
const spot = (action: string | undefined): ShutdownObservation["spotAction"] => ({ ok: true, action });
const failed = (problem: string) => ({ ok: false as const, problem });
const observed = (
  shutdown: ShutdownObservation | undefined,
  over: Partial<ReleaseObservation> = {},
): ReleaseObservation => ({
  identity,
  held: [mounted(volume("vol-1"))],
  untagged: [],
  ...(shutdown ? { shutdown } : {}),
  daemonJson: { ok: true, dataRoot: ON_CACHE, agentLabels: ["io.simcore.ebs-cache.state=ready"] },
  docker: { active: false },
  ...over,
});
const steps = (plan: ReturnType<typeof planRelease>) => plan.steps.map((s) => s.step);
const FULL = ["withdraw-labels", "reset-data-root", "sync", "unmount", "detach", "wait-detached", "tag-released"];
const KEPT = ["withdraw-labels", "reset-data-root", "sync", "unmount", "keep-attached"];

t.test("the fate: the instance's own state first, then the spot notice; anything else is unknown", async (t) => {
  const cases: Array<[string, ShutdownObservation, "stop" | "terminate" | "unknown", RegExp]> = [
    [
      "stopping",
      { instanceState: state("stopping"), spotAction: spot(undefined) },
      "stop",
      /EC2 shows the instance 'stopping'/,
    ],
    ["stopped", { instanceState: state("stopped"), spotAction: spot(undefined) }, "stop", /'stopped'/],
    [
      "shutting-down",
      { instanceState: state("shutting-down"), spotAction: spot(undefined) },
      "terminate",
      /'shutting-down'/,
    ],
    ["terminated", { instanceState: state("terminated"), spotAction: spot(undefined) }, "terminate", /'terminated'/],
    [
      "state wins over the notice",
      { instanceState: state("shutting-down"), spotAction: spot("stop") },
      "terminate",
      /'shutting-down'/,
    ],
    [
      "stopping, notice unreadable",
      { instanceState: state("stopping"), spotAction: failed("timeout") },
      "stop",
      /'stopping'/,
    ],
    [
      "running + spot stop",
      { instanceState: state("running"), spotAction: spot("stop") },
      "stop",
      /spot interruption notice says 'stop'/,
    ],
    [
      "running + spot hibernate",
      { instanceState: state("running"), spotAction: spot("hibernate") },
      "stop",
      /'hibernate'/,
    ],
    [
      "running + spot terminate",
      { instanceState: state("running"), spotAction: spot("terminate") },
      "terminate",
      /notice says 'terminate'/,
    ],
    [
      "state failed + spot stop",
      { instanceState: failed("throttled"), spotAction: spot("stop") },
      "stop",
      /notice says 'stop'/,
    ],
    [
      "running, no notice (a release by hand)",
      { instanceState: state("running"), spotAction: spot(undefined) },
      "unknown",
      /'running'; no spot interruption notice/,
    ],
    [
      "state failed, no notice",
      { instanceState: failed("RequestLimitExceeded"), spotAction: spot(undefined) },
      "unknown",
      /could not be learned \(RequestLimitExceeded\)/,
    ],
    [
      "both failed",
      { instanceState: failed("timeout"), spotAction: failed("refused") },
      "unknown",
      /could not be learned.*could not be read \(refused\)/,
    ],
    [
      "unexpected state value",
      { instanceState: state("rebooting"), spotAction: spot(undefined) },
      "unknown",
      /'rebooting'/,
    ],
    [
      "unexpected notice value",
      { instanceState: failed("x"), spotAction: spot("reboot") },
      "unknown",
      /'reboot' not understood/,
    ],
    [
      "running + a reboot queued (EC2 shows a rebooting instance running)",
      { instanceState: state("running"), spotAction: spot(undefined), reboot: { ok: true, queued: true } },
      "stop",
      /rebooting \(systemd has reboot.target queued\)/,
    ],
    [
      "running, no reboot queued (a poweroff)",
      { instanceState: state("running"), spotAction: spot(undefined), reboot: { ok: true, queued: false } },
      "unknown",
      /no spot interruption notice; no reboot queued/,
    ],
    [
      "reboot queued but EC2 shows shutting-down: the state wins",
      { instanceState: state("shutting-down"), spotAction: spot(undefined), reboot: { ok: true, queued: true } },
      "terminate",
      /'shutting-down'/,
    ],
    [
      "reboot queued but the spot notice says terminate",
      { instanceState: state("running"), spotAction: spot("terminate"), reboot: { ok: true, queued: true } },
      "terminate",
      /notice says 'terminate'/,
    ],
    [
      "systemd could not be asked",
      { instanceState: state("running"), spotAction: spot(undefined), reboot: { ok: false, problem: "no systemctl" } },
      "unknown",
      /could not be learned \(no systemctl\)/,
    ],
  ];
  for (const [name, obs, kind, reason] of cases) {
    const fate = instanceFate(obs);
    t.equal(fate.kind, kind, name);
    t.match(fate.reason, reason, `${name}: says why`);
  }
  t.same(instanceFate(undefined), {
    kind: "unknown",
    reason: "not asked: no cache volume is attached to this instance",
  });
});

t.test("a stop: labels off, data-root reset, sync, unmount, keep-attached; no detach, no release tags", async (t) => {
  const plan = planRelease(settings, observed({ instanceState: state("stopping"), spotAction: spot(undefined) }));
  t.equal(plan.decision, "release");
  t.equal(plan.shutdown.kind, "stop");
  t.same(steps(plan), KEPT);
  t.same(
    plan.steps.at(-1),
    { step: "keep-attached", volumeId: "vol-1", setTags: {}, removeTags: [] },
    "no expiry tag to remove, the intent on the volume already",
  );
  t.notOk(
    steps(plan).some((s) => s === "detach" || s === "tag-released"),
    "neither detached nor tagged released",
  );
  t.same(JSON.parse(JSON.stringify(plan)), plan, "serializable, shutdown included (release --dry-run --json)");
});

t.test(
  "a stop with docker still running on the volume: docker is stopped first; refused as before without " +
    "release.stopDocker",
  async (t) => {
    const obs = observed(
      { instanceState: state("stopping"), spotAction: spot(undefined) },
      { docker: { active: true, dataRoot: ON_CACHE } },
    );
    t.same(steps(planRelease(settings, obs)), [
      "withdraw-labels",
      "reset-data-root",
      "stop-docker",
      "sync",
      "unmount",
      "keep-attached",
    ]);
    t.equal(planRelease({ ...settings, stopDocker: false }, obs).decision, "refused");
  },
);

t.test(
  "a stop removes an expiry left on a kept volume (a stopped instance's volume must never expire under it)",
  async (t) => {
    const stale = volume("vol-1", {
      tags: {
        ...volume("vol-1").tags,
        [VolumeTag.releasedAt]: "2030-01-01T09:00:00.000Z",
        [VolumeTag.expiresAt]: "2030-01-02T09:00:00.000Z",
      },
    });
    const plan = planRelease(
      settings,
      observed({ instanceState: state("stopped"), spotAction: spot(undefined) }, { held: [mounted(stale)] }),
    );
    t.same(plan.steps.at(-1), {
      step: "keep-attached",
      volumeId: "vol-1",
      setTags: {},
      removeTags: [VolumeTag.releasedAt, VolumeTag.expiresAt],
    });
  },
);

t.test(
  "a stop writes the instance's intent as it is now: a stopped warm buffer may be terminated with no release",
  async (t) => {
    const stopping = { instanceState: state("stopping"), spotAction: spot(undefined) };
    const workspace = heldVolume("vol-1", "workspace");
    const keepNow = planRelease(
      { ...settings, keep: { by: "instance", keep: true }, ttlHours: 72 },
      observed(stopping, { held: [mounted(workspace)] }),
    );
    t.same(
      keepNow.steps.at(-1),
      {
        step: "keep-attached",
        volumeId: "vol-1",
        setTags: { [VolumeTag.ttlHours]: "72", [VolumeTag.keep]: "true", [VolumeTag.keepBy]: ME },
        removeTags: [],
      },
      "keep and a TTL asked since the claim",
    );
    const ownKeep = heldVolume("vol-1", "workspace", {
      tags: { ...workspace.tags, [VolumeTag.keep]: "true", [VolumeTag.keepBy]: ME },
    });
    const dropped = planRelease(settings, observed(stopping, { held: [mounted(ownKeep)] }));
    t.same(
      dropped.steps.at(-1),
      { step: "keep-attached", volumeId: "vol-1", setTags: {}, removeTags: [VolumeTag.keep, VolumeTag.keepBy] },
      "the keep its claim wrote, no longer asked: removed",
    );
    const poolKeep = planRelease({ ...settings, keep: { by: "instance", keep: true } }, observed(stopping));
    t.same(
      poolKeep.steps.at(-1),
      { step: "keep-attached", volumeId: "vol-1", setTags: {}, removeTags: [] },
      "a pool volume is never kept",
    );
  },
);

t.test(
  "a stop still finishes what an earlier release started: a detach under way, a volume detached but untagged",
  async (t) => {
    const detaching = volume("vol-2", { attachment: { instanceId: ME, device: "/dev/sdg", state: "detaching" } });
    const untagged = volume("vol-3", { state: "available" });
    delete (untagged as { attachment?: unknown }).attachment;
    const plan = planRelease(
      settings,
      observed(
        { instanceState: state("stopping"), spotAction: spot(undefined) },
        { held: [mounted(volume("vol-1")), { volume: detaching, mountPoints: [] }], untagged: [untagged] },
      ),
    );
    t.same(
      plan.steps.filter((s) => "volumeId" in s).map((s) => `${s.step} ${(s as { volumeId: string }).volumeId}`),
      [
        "sync vol-1",
        "unmount vol-1",
        "keep-attached vol-1",
        "wait-detached vol-2",
        "tag-released vol-2",
        "tag-released vol-3",
      ],
    );
  },
);

t.test("terminate, unknown, or not asked: the full release as before", async (t) => {
  for (const [name, shutdown] of [
    ["shutting-down", { instanceState: state("shutting-down"), spotAction: spot(undefined) }],
    ["spot terminate", { instanceState: state("running"), spotAction: spot("terminate") }],
    ["unknown", { instanceState: failed("timeout"), spotAction: failed("timeout") }],
    ["not asked", undefined],
  ] as const) {
    const plan = planRelease(settings, observed(shutdown));
    t.same(steps(plan), FULL, name);
    t.not(plan.shutdown.kind, "stop", name);
  }
});

t.test("disabled: nothing is done whatever the fate", async (t) => {
  const plan = planRelease(
    { ...settings, enabled: false },
    observed({ instanceState: state("stopping"), spotAction: spot(undefined) }),
  );
  t.equal(plan.decision, "disabled");
  t.same(plan.steps, []);
});

t.test(
  "systemd's job list: a queued start of reboot.target, kexec.target or soft-reboot.target is a reboot",
  async (t) => {
    const jobs = (unit: string, type = "start") =>
      `1234 ${unit} ${type} waiting\n1200 ebs-cache-agent.service stop running\n`;
    t.ok(rebootQueuedIn(jobs("reboot.target")));
    t.ok(rebootQueuedIn(jobs("kexec.target")));
    t.ok(rebootQueuedIn(jobs("soft-reboot.target")));
    t.notOk(rebootQueuedIn(jobs("poweroff.target")), "a poweroff is no reboot");
    t.notOk(rebootQueuedIn(jobs("halt.target")));
    t.notOk(rebootQueuedIn(jobs("reboot.target", "stop")), "only a start of the target");
    t.notOk(rebootQueuedIn(""), "no jobs");
    t.notOk(rebootQueuedIn("  12 ebs-cache-agent.service stop running  "));
  },
);
