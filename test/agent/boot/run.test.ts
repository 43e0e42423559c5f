/**
 * The boot (runBoot: claim, attach, device, identify, mount, switch, docker, report) in process
 * against the port fakes (test/fixtures/fakes): EC2's rules from the lab's emulator over its
 * in-memory backend, the host, docker and labels as plain objects. No root. What the lab tests
 * prove with loop devices and a real dockerd, these prove for every step's failure and undo.
 */
import t, { type Test } from "tap";
import { runBoot } from "../../../src/agent/boot/run.ts";
import { ConfigError, StopSignalReceived } from "../../../src/errors.ts";
import { Label, VolumeTag } from "../../../src/tags.ts";
import { fakeNode, waitFor, DEFAULT_ROOT, type FakeNode } from "../../fixtures/fakes/index.ts";

const IMAGES = "lab/app:1,lab/tool:1";
const POOL_TAGS = {
  [VolumeTag.managed]: "true",
  [VolumeTag.kind]: "pool",
  [VolumeTag.pool]: "default",
  [VolumeTag.images]: IMAGES,
};

/** A node with `pool` available pool volumes in its zone, whose images docker lists on each one's data-root. */
async function poolNode(
  t: Parameters<typeof fakeNode>[0],
  pool: number,
  options: Parameters<typeof fakeNode>[1] = {},
): Promise<{ node: FakeNode; volumes: string[] }> {
  const node = await fakeNode(t, options);
  const volumes: string[] = [];
  for (let i = 0; i < pool; i++) {
    const volume = await node.fake.volume({ tags: { ...POOL_TAGS } });
    volumes.push(volume.volumeId);
    node.docker.state.images.set(`${node.config.paths.mountRoot}/${volume.volumeId}/docker`, IMAGES.split(","));
  }
  return { node, volumes };
}

const boot = (node: FakeNode) => runBoot(node.config, node.adapters(), { dryRun: false });

/** The volume is back in the pool: available, no attachment, no claim of this instance, never force-detached. */
async function handedBack(t: Tap, node: FakeNode, volumeId: string): Promise<Record<string, string>> {
  await waitFor(async () => (await node.fake.describe(volumeId)).state === "available", `${volumeId} available`);
  const volume = await node.fake.describe(volumeId);
  t.equal(volume.attachment, undefined, `${volumeId}: no attachment`);
  t.equal(volume.tags[VolumeTag.claimedBy], undefined, `${volumeId}: claimed-by removed`);
  t.equal(node.fake.forceDetaches(), 0, "never force-detached");
  t.same(node.host.mounted.get(node.host.deviceOf(volumeId)) ?? [], [], `${volumeId}: not mounted`);
  return volume.tags;
}
type Tap = Test;

/** docker back on its default root (daemon.json's key gone), the node labelled degraded. */
function degradedCleanly(t: Tap, node: FakeNode): void {
  t.equal(node.docker.state.daemonJson["data-root"], undefined, "daemon.json's data-root back to the default");
  t.equal(node.docker.state.runningRoot, DEFAULT_ROOT, "docker runs on its default root");
  t.equal(node.labels.current(), "degraded", "labelled degraded");
}

t.test("a pool volume is claimed, attached, identified, mounted, and docker switched to it", async (t) => {
  const { node, volumes } = await poolNode(t, 1);
  const [volumeId] = volumes as [string];
  const outcome = await boot(node);
  t.equal(outcome.exitCode, 0);
  t.equal(outcome.report?.outcome, "ready");
  t.equal(outcome.report?.volumeId, volumeId);
  const dataRoot = `${node.config.paths.mountRoot}/${volumeId}/docker`;
  t.equal(outcome.report?.dataRoot, dataRoot);
  const volume = await node.fake.describe(volumeId);
  t.equal(volume.attachment?.instanceId, node.instance.instanceId, "attached here");
  t.equal(volume.attachment?.state, "attached");
  t.equal(volume.tags[VolumeTag.claimedBy], node.instance.instanceId, "claimed-by this instance");
  t.ok(volume.tags[VolumeTag.claimedAt], "claimed-at written");
  t.same(
    node.host.mounted.get(node.host.deviceOf(volumeId)),
    [`${node.config.paths.mountRoot}/${volumeId}`],
    "mounted at its mount point",
  );
  t.equal(node.docker.state.daemonJson["data-root"], dataRoot, "daemon.json's data-root on the volume");
  t.equal(node.docker.state.runningRoot, dataRoot, "docker runs there");
  t.equal(node.labels.current(), "ready");
  t.equal(node.labels.reports.at(-1)?.details[Label.volumeId], volumeId, "the label names the volume");
  // The order that keeps data safe: the claim before the device, identification before the mount, the mount before the
  // switch.
  const order = node.script.names("cloud.claimVolume", "storage.", "daemon-json.setDataRoot", "docker.");
  const at = (name: string) => order.indexOf(name);
  t.ok(at("cloud.claimVolume") < at("storage.waitForDevice"), "claim, then device");
  t.ok(at("storage.waitForDevice") < at("storage.identify"), "device, then identify");
  t.ok(at("storage.identify") < at("storage.mount"), "identify, then mount");
  t.ok(at("storage.mount") < at("daemon-json.setDataRoot"), "mount, then switch");
  t.ok(at("daemon-json.setDataRoot") < at("docker.start"), "switch, then docker");
  t.equal(node.script.of("storage.format").length, 0, "a pool volume is never formatted");
  const finished = node.recorder.recorded.filter((r) => r.kind === "bootFinished");
  t.equal(finished.length, 1, "the outcome is recorded once");
  t.match(finished[0]?.value, { phase: "single", report: { outcome: "ready", volumeId } });
});

t.test("a rerun on the same instance reuses the attached volume: no second claim", async (t) => {
  const { node, volumes } = await poolNode(t, 2);
  const first = await boot(node);
  const claims = node.script.of("cloud.claimVolume").length;
  const again = await boot(node);
  t.equal(again.report?.outcome, "ready");
  t.equal(again.report?.volumeId, first.report?.volumeId, "the same volume");
  t.equal(node.script.of("cloud.claimVolume").length, claims, "no AttachVolume on the rerun");
  t.equal(node.script.of("storage.mount").length, 1, "not mounted twice");
  const other = volumes.find((v) => v !== first.report?.volumeId)!;
  t.equal((await node.fake.describe(other)).state, "available", "the other pool volume untouched");
});

t.test(
  "a claim lost to another instance: the next candidate is claimed, the lost one left to its holder",
  async (t) => {
    const { node, volumes } = await poolNode(t, 2);
    const rival = node.fake.addInstance();
    let lost: string | undefined;
    // Just before this boot's first AttachVolume, another instance attaches the same volume.
    node.script.before("cloud.claimVolume", async (args) => {
      lost = args[0] as string;
      await node.fake.attach(lost, rival);
    });
    const outcome = await boot(node);
    t.equal(outcome.report?.outcome, "ready");
    t.ok(lost && volumes.includes(lost));
    const won = volumes.find((v) => v !== lost)!;
    t.equal(outcome.report?.volumeId, won, "the other candidate");
    const lostVolume = await node.fake.describe(lost!);
    t.equal(lostVolume.attachment?.instanceId, rival.instanceId, "the lost volume stays the rival's");
    t.equal(lostVolume.tags[VolumeTag.claimedBy], undefined, "and carries no claim of this instance");
    t.equal(node.script.of("cloud.claimVolume").length, 2, "two AttachVolume calls");
    t.ok(
      node.log.lines.some((l) => l.includes("candidate taken by another instance")),
      "the loss is logged",
    );
  },
);

t.test("every candidate lost and no snapshot: degraded, nothing held", async (t) => {
  const { node, volumes } = await poolNode(t, 1);
  const rival = node.fake.addInstance();
  node.script.before("cloud.claimVolume", async () => node.fake.attach(volumes[0]!, rival));
  const outcome = await boot(node);
  t.equal(outcome.report?.outcome, "degraded");
  t.equal(outcome.exitCode, 4);
  t.match(outcome.report?.reason, /taken|lost/);
  degradedCleanly(t, node);
  t.equal(node.script.of("storage.mount").length, 0, "nothing mounted");
});

t.test("a volume in quarantine is no candidate; with none other, the snapshot serves", async (t) => {
  const node = await fakeNode(t);
  const quarantined = await node.fake.volume({
    tags: { ...POOL_TAGS, [VolumeTag.lastError]: "i-0: bad", [VolumeTag.lastErrorAt]: new Date().toISOString() },
  });
  const snapshotId = await node.fake.snapshot({ ...POOL_TAGS });
  node.docker.state.images.set("*", IMAGES.split(","));
  const outcome = await boot(node);
  t.equal(outcome.report?.outcome, "ready", outcome.report?.reason ?? "ready");
  t.not(outcome.report?.volumeId, quarantined.volumeId, "the quarantined volume is not taken");
  t.equal(outcome.report?.source, "snapshot");
  const made = await node.fake.describe(outcome.report!.volumeId!);
  t.equal(made.snapshotId, snapshotId, "made from the pool's snapshot");
  t.equal((await node.fake.describe(quarantined.volumeId)).state, "available", "the quarantined volume untouched");
  t.notOk(
    node.script.of("cloud.claimVolume").some((c) => c.args[0] === quarantined.volumeId),
    "never attached",
  );
});

t.test(
  "a foreign filesystem is handed back quarantined, never formatted, and the next candidate claimed",
  async (t) => {
    const { node, volumes } = await poolNode(t, 2);
    let foreign: string | undefined;
    node.script.before("storage.identify", (args) => {
      foreign = (args[0] as { volumeId: string }).volumeId;
      node.host.contents.set(foreign, { foreign: 'an ext4 filesystem labelled "data"' });
    });
    const outcome = await boot(node);
    t.equal(outcome.report?.outcome, "ready");
    t.equal(
      outcome.report?.volumeId,
      volumes.find((v) => v !== foreign),
      "the next candidate",
    );
    const tags = await handedBack(t, node, foreign!);
    t.match(tags[VolumeTag.lastError], /ext4/, "quarantined with the reason");
    t.ok(tags[VolumeTag.lastErrorAt], "and when");
    t.equal(node.script.of("storage.format").length, 0, "nothing formatted");
    t.notOk(
      node.script.of("storage.mount").some((c) => c.args[0] === node.host.deviceOf(foreign!)),
      "the foreign volume never mounted",
    );
  },
);

t.test(
  "a device that never appears while EC2 says attached is the host's fault: degraded, not quarantined",
  async (t) => {
    const { node, volumes } = await poolNode(t, 2);
    node.script.before("storage.waitForDevice", (args) => void node.host.neverAppears.add(args[0] as string));
    const outcome = await boot(node);
    t.equal(outcome.report?.outcome, "degraded");
    t.match(outcome.report?.reason, /did not appear/);
    const tried = node.script.of("storage.waitForDevice").map((c) => c.args[0] as string);
    t.equal(tried.length, 1, "no second candidate: good volumes are not quarantined one after another");
    const tags = await handedBack(t, node, tried[0]!);
    t.equal(tags[VolumeTag.lastError], undefined, "not quarantined");
    t.equal(volumes.length, 2);
    degradedCleanly(t, node);
  },
);

t.test("a device that never appears while EC2 never finishes the attach: quarantined, next candidate", async (t) => {
  const { node, volumes } = await poolNode(t, 2);
  let stuck: string | undefined;
  node.script.before("cloud.claimVolume", (args) => {
    stuck = args[0] as string;
    node.fake.emulator.setFaults({ stuckAttach: [stuck] });
    node.host.neverAppears.add(stuck);
    node.host.deviceWaitMs = 300;
  });
  const outcome = await boot(node);
  t.equal(outcome.report?.outcome, "ready", outcome.report?.reason ?? "ready");
  t.equal(
    outcome.report?.volumeId,
    volumes.find((v) => v !== stuck),
  );
  const volume = await node.fake.describe(stuck!);
  t.match(volume.tags[VolumeTag.lastError], /did not appear/, "quarantined");
  t.equal(volume.tags[VolumeTag.claimedBy], undefined, "claim removed");
  t.ok(
    node.script.of("cloud.detachVolume").some((c) => c.args[0] === stuck),
    "its detach was asked (never forced)",
  );
  t.equal(node.fake.forceDetaches(), 0);
});

/** A failure at each step after the claim: undone in reverse, the node degraded or the volume handed back. */
const FAILURES: Array<{ step: string; call: string; quarantine: boolean; nextCandidate: boolean }> = [
  { step: "tag-claim", call: "cloud.tagVolume", quarantine: false, nextCandidate: false },
  { step: "mount", call: "storage.mount", quarantine: true, nextCandidate: true },
  { step: "prepare-data-root", call: "host.prepareDataRoot", quarantine: true, nextCandidate: true },
  { step: "switch-data-root", call: "daemon-json.setDataRoot", quarantine: false, nextCandidate: false },
  { step: "start-docker", call: "docker.start", quarantine: true, nextCandidate: false },
  { step: "verify-docker", call: "engine.images", quarantine: true, nextCandidate: false },
  { step: "report-ready", call: "labels.report", quarantine: false, nextCandidate: false },
];
for (const failure of FAILURES) {
  t.test(`a failure at ${failure.step} (${failure.call} throws once)`, async (t) => {
    const { node, volumes } = await poolNode(t, 2);
    node.script.failNext(failure.call, new Error(`${failure.call} failed (scripted)`));
    const outcome = await boot(node);
    const first = node.script.of("cloud.claimVolume")[0]?.args[0] as string;
    t.ok(volumes.includes(first), "a pool volume was claimed first");
    if (failure.step === "report-ready") {
      // The labels did not take: docker stays on the (good) volume, the node is not reported ready.
      t.equal(outcome.report?.outcome, "degraded");
      t.match(outcome.report?.reason, /readiness labels did not take/);
      t.equal((await node.fake.describe(first)).attachment?.instanceId, node.instance.instanceId, "volume kept");
      t.equal(node.labels.current(), "degraded");
      return;
    }
    if (failure.nextCandidate) {
      t.equal(outcome.report?.outcome, "ready", "the next candidate served");
      t.equal(
        outcome.report?.volumeId,
        volumes.find((v) => v !== first),
      );
    } else {
      t.equal(outcome.report?.outcome, "degraded");
      t.match(outcome.report?.reason, /scripted|images missing|failed/);
      degradedCleanly(t, node);
    }
    const tags = await handedBack(t, node, first);
    if (failure.quarantine) t.ok(tags[VolumeTag.lastError], "the volume is quarantined");
    else t.equal(tags[VolumeTag.lastError], undefined, "not quarantined: not the volume's fault");
    t.equal(tags[VolumeTag.claimedAt], undefined, "its claimed-at removed");
  });
}

t.test(
  "the undo leaves attached a volume still mounted in another mount namespace after its unmount, past the bound",
  async (t) => {
    const { node, volumes } = await poolNode(t, 1, { config: { timeouts: { mountHolderSeconds: 0.2 } } });
    const volumeId = volumes[0]!;
    node.host.namespaceHolders.set(node.host.deviceOf(volumeId), [
      { ns: "mnt:[4026532900]", processes: [{ pid: 4242, command: "sleep 600" }], mountPoints: ["/srv/cache"] },
    ]);
    node.script.failNext("docker.start", new Error("docker.start failed (scripted)"));
    const outcome = await boot(node);
    t.equal(outcome.report?.outcome, "degraded");
    t.ok(node.script.of("storage.unmount").length > 0, "unmounted here");
    t.equal(node.script.of("cloud.detachVolume").length, 0, "not detached: live in the other namespace");
    const volume = await node.fake.describe(volumeId);
    t.equal(volume.attachment?.instanceId, node.instance.instanceId, "still attached here");
    t.equal(node.fake.forceDetaches(), 0);
    t.match(
      node.log.lines.find((line) => line.includes("boot.undo") && line.includes("not detaching")),
      /held by pid 4242 "sleep 600".*still there at the end of the 0\.2 s the detach waits for it \(timeouts\.mount/,
      "the undo's refusal says how long it waited",
    );
  },
);

t.test("the undo waits for a copy of the mount held for a moment, then hands the volume back", async (t) => {
  const { node, volumes } = await poolNode(t, 1);
  const volumeId = volumes[0]!;
  node.host.namespaceHolders.set(node.host.deviceOf(volumeId), [
    { ns: "mnt:[4026532901]", processes: [{ pid: 5151, command: "runc init" }], mountPoints: ["/srv/cache"] },
  ]);
  // Gone before the undo's second look: counted in looks, not in time (the bound is config's 10 s).
  let looks = 0;
  node.script.before("storage.liveness", () => void (++looks === 2 && node.host.namespaceHolders.clear()), {
    times: 2,
  });
  node.script.failNext("docker.start", new Error("docker.start failed (scripted)"));
  const outcome = await boot(node);
  t.equal(outcome.report?.outcome, "degraded");
  t.equal(node.script.of("cloud.detachVolume").length, 1, "detached once the copy went");
  await handedBack(t, node, volumeId);
  t.match(
    node.log.lines.find((line) => line.includes("boot.mount-held")),
    /held by pid 5151 "runc init" \(mnt:\[4026532901\], at \/srv\/cache\): waiting up to 10 s/,
  );
  t.ok(
    node.log.lines.some((line) => line.includes("boot.mount-released")),
    "the log says it went",
  );
});

t.test("an unparsable daemon.json refuses the boot before any claim", async (t) => {
  const { node } = await poolNode(t, 1, { docker: { unparsable: true } });
  const outcome = await boot(node);
  t.equal(outcome.report?.outcome, "degraded");
  t.equal(node.script.of("cloud.claimVolume").length, 0, "nothing claimed");
  t.equal(node.script.of("daemon-json.setDataRoot").length, 0, "daemon.json not written");
  t.equal(node.labels.reports.length, 0, "no label written into the host's docker config");
});

t.test("bad instance tags: ConfigError before any EC2 call", async (t) => {
  const node = await fakeNode(t, { tags: { "ebs-cache:pool": "not a pool!" } });
  await t.rejects(boot(node), ConfigError);
  t.same(node.script.names("cloud."), [], "no EC2 call");
  t.same(node.script.names("storage.", "daemon-json.", "docker."), [], "nothing on the host");
});

for (const [signal, remediation] of [
  ["SIGTERM", /systemd stopped the unit/],
  ["SIGINT", /interrupted \(Ctrl-C\): run the boot again/],
] as const) {
  t.test(`${signal} during the device wait: the claim is undone, the node degrades, the reason names it`, async (t) => {
    const { node, volumes } = await poolNode(t, 1);
    const controller = new AbortController();
    node.script.before("storage.waitForDevice", () => controller.abort(new StopSignalReceived(signal)));
    const outcome = await runBoot(node.config, node.adapters(), { dryRun: false, signal: controller.signal });
    t.equal(outcome.report?.outcome, "degraded");
    t.match(outcome.report?.reason, `stopped by ${signal} before it finished`);
    t.match(node.log.lines.join("\n"), remediation, "the remediation fits the signal");
    const tags = await handedBack(t, node, volumes[0]!);
    t.equal(tags[VolumeTag.lastError], undefined, "a stop is not the volume's fault");
  });
}
