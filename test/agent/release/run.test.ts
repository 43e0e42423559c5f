/**
 * The release (runRelease) in process against the port fakes: after a boot on the same fakes,
 * what it gives back and what it refuses (a mounted volume in use, docker it may not stop), what
 * it never touches (a volume not managed, one another instance holds), and a stop, which keeps
 * the volume attached. No root.
 */
import t from "tap";
import { runBoot } from "../../../src/agent/boot/run.ts";
import { runRelease } from "../../../src/agent/release/run.ts";
import { StopSignalReceived } from "../../../src/errors.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { fakeNode, waitFor, type FakeNode } from "../../fixtures/fakes/index.ts";

const POOL_TAGS = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "default" };

/** A node booted on a pool volume: mounted, docker on it, labelled ready. */
async function bootedNode(
  t: Parameters<typeof fakeNode>[0],
  options: Parameters<typeof fakeNode>[1] = {},
): Promise<{ node: FakeNode; volumeId: string }> {
  const node = await fakeNode(t, options);
  const { volumeId } = await node.fake.volume({ tags: { ...POOL_TAGS } });
  const booted = await runBoot(node.config, node.adapters(), { dryRun: false });
  if (booted.report?.outcome !== "ready") throw new Error(`boot: ${booted.report?.reason}`);
  return { node, volumeId };
}

const release = (node: FakeNode) => runRelease(node.config, node.adapters(), { dryRun: false });

t.test("after a boot: unmounted, docker off the volume, detached without force, tagged released", async (t) => {
  const { node, volumeId } = await bootedNode(t);
  const outcome = await release(node);
  t.equal(outcome.exitCode, 0);
  t.equal(outcome.report?.outcome, "released");
  t.same(outcome.report?.released, [volumeId]);
  const volume = await node.fake.describe(volumeId);
  t.equal(volume.state, "available");
  t.equal(volume.attachment, undefined);
  t.equal(volume.tags[VolumeTag.claimedBy], undefined, "claimed-by removed");
  t.ok(volume.tags[VolumeTag.releasedAt], "released-at");
  t.ok(volume.tags[VolumeTag.expiresAt], "expires-at");
  t.same(node.host.mounted.get(node.host.deviceOf(volumeId)), [], "unmounted");
  t.equal(node.docker.state.daemonJson["data-root"], undefined, "daemon.json's data-root back to the default");
  t.equal(node.docker.state.active, false, "docker stopped (it ran on the volume)");
  t.equal(node.fake.forceDetaches(), 0, "never forced");
  const order = node.script.names("docker.stop", "storage.unmount", "cloud.detachVolume", "cloud.tagVolume");
  t.ok(order.indexOf("docker.stop") < order.indexOf("storage.unmount"), "docker stops before the unmount");
  t.ok(order.indexOf("storage.unmount") < order.indexOf("cloud.detachVolume"), "unmount before the detach");
  t.ok(order.lastIndexOf("cloud.detachVolume") < order.lastIndexOf("cloud.tagVolume"), "tagged after the detach");
  t.match(node.recorder.recorded.find((r) => r.kind === "releaseFinished")?.value, { report: { outcome: "released" } });

  const again = await release(node);
  t.equal(again.report?.outcome, "nothing", "a second release finds nothing held");
  t.equal(node.script.of("cloud.detachVolume").length, 1, "and detaches nothing");
});

t.test("refused: the volume's mount is busy; nothing detached, nothing tagged", async (t) => {
  const { node, volumeId } = await bootedNode(t);
  node.host.busyMounts.add(`${node.config.paths.mountRoot}/${volumeId}`);
  const outcome = await release(node);
  t.equal(outcome.exitCode, 1);
  t.equal(outcome.report?.outcome, "refused");
  t.match(outcome.report?.reason, /could not be unmounted/);
  t.equal(node.script.of("cloud.detachVolume").length, 0, "no DetachVolume");
  const volume = await node.fake.describe(volumeId);
  t.equal(volume.attachment?.instanceId, node.instance.instanceId, "still attached here");
  t.equal(volume.tags[VolumeTag.claimedBy], node.instance.instanceId, "still claimed");
  t.equal(volume.tags[VolumeTag.releasedAt], undefined, "not tagged released");

  node.host.busyMounts.clear();
  const later = await release(node);
  t.equal(later.report?.outcome, "released", "once the mount is free, the next release completes");
});

t.test(
  "refused at the detach: the filesystem is still mounted in another mount namespace past the bound; released " +
    "once it is not",
  async (t) => {
    const { node, volumeId } = await bootedNode(t, { config: { timeouts: { mountHolderSeconds: 0.2 } } });
    const device = node.host.deviceOf(volumeId);
    node.host.namespaceHolders.set(device, [
      { ns: "mnt:[4026532900]", processes: [{ pid: 4242, command: "sleep 600" }], mountPoints: ["/srv/cache"] },
    ]);
    const outcome = await release(node);
    t.equal(outcome.exitCode, 1);
    t.equal(outcome.report?.outcome, "refused");
    const problem = outcome.report?.problems[0];
    t.equal(problem?.step, "detach", "at the detach");
    t.equal(problem?.kind, "refused");
    t.match(problem?.message, /still mounted in another mount namespace, held by pid 4242 "sleep 600"/);
    t.match(
      problem?.message,
      /still there at the end of the 0\.2 s the detach waits for it \(timeouts\.mountHolderSeconds\); /,
      "after its wait",
    );
    t.ok(node.script.of("storage.liveness").length > 1, "looked at again before refusing");
    t.match(problem?.remediation, /nsenter -t 4242 -m umount \/srv\/cache/);
    t.equal(node.script.of("cloud.detachVolume").length, 0, "no DetachVolume");
    const volume = await node.fake.describe(volumeId);
    t.equal(volume.attachment?.instanceId, node.instance.instanceId, "still attached here");
    t.equal(volume.tags[VolumeTag.releasedAt], undefined, "not tagged released");

    node.host.namespaceHolders.clear();
    const later = await release(node);
    t.equal(later.report?.outcome, "released", "once no namespace holds it, the next release completes");
    t.equal(node.fake.forceDetaches(), 0, "never forced");
  },
);

t.test(
  "a copy of the mount held for a moment in another namespace (a container starting): the release waits for it " +
    "to go and releases; the log names the holder",
  async (t) => {
    const { node, volumeId } = await bootedNode(t);
    const device = node.host.deviceOf(volumeId);
    node.host.namespaceHolders.set(device, [
      { ns: "mnt:[4026532901]", processes: [{ pid: 5151, command: "runc init" }], mountPoints: ["/srv/cache"] },
    ]);
    // Gone before the third look: counted in looks, not in time (the bound is config's 10 s).
    let looks = 0;
    node.script.before("storage.liveness", () => void (++looks === 3 && node.host.namespaceHolders.clear()), {
      times: 3,
    });
    const outcome = await release(node);
    t.equal(outcome.report?.outcome, "released", "released");
    t.equal(outcome.exitCode, 0);
    t.equal(node.script.of("cloud.detachVolume").length, 1, "detached once the copy went");
    t.equal(node.fake.forceDetaches(), 0, "never forced");
    const held = node.log.lines.find((line) => line.includes("release.mount-held"));
    t.match(held, /held by pid 5151 "runc init" \(mnt:\[4026532901\], at \/srv\/cache\): waiting up to 10 s/);
    const gone = node.log.lines.find((line) => line.includes("release.mount-released"));
    t.match(gone, /heldBy="pid 5151 \\"runc init\\" \(mnt:\[4026532901\], at \/srv\/cache\) for \d/);
  },
);

t.test("refused: a second mount of the volume made by someone else is busy", async (t) => {
  const { node, volumeId } = await bootedNode(t);
  const device = node.host.deviceOf(volumeId);
  node.host.mounted.get(device)!.push("/srv/someone-else");
  node.host.busyMounts.add("/srv/someone-else");
  const outcome = await release(node);
  t.equal(outcome.report?.outcome, "refused");
  t.match(outcome.report?.reason, /\/srv\/someone-else/);
  t.equal(node.script.of("cloud.detachVolume").length, 0, "a mounted volume is never detached");
  t.equal((await node.fake.describe(volumeId)).attachment?.state, "attached");
});

t.test("refused: docker runs on the volume and the agent does not control it", async (t) => {
  const { node, volumeId } = await bootedNode(t);
  const config = { ...node.config, docker: { ...node.config.docker, control: "none" as const } };
  const outcome = await runRelease(config, node.adapters({ docker: undefined }), { dryRun: false });
  t.equal(outcome.report?.outcome, "refused");
  t.match(outcome.report?.reason, /docker still runs on the cache volume/);
  t.equal(node.script.of("storage.unmount").length, 0, "nothing unmounted");
  t.equal(node.script.of("daemon-json.setDataRoot").length, 1, "daemon.json untouched since the boot's switch");
  t.equal((await node.fake.describe(volumeId)).attachment?.state, "attached");
});

t.test("not ours: a volume without the managed tag attached here is never detached", async (t) => {
  const node = await fakeNode(t);
  const foreign = await node.fake.volume({ tags: { Name: "someone's data" } });
  await node.fake.attach(foreign.volumeId, node.instance, "/dev/sdg");
  const outcome = await release(node);
  t.equal(outcome.report?.outcome, "nothing");
  t.equal(node.script.of("cloud.detachVolume").length, 0);
  t.equal(
    (await node.fake.describe(foreign.volumeId)).attachment?.instanceId,
    node.instance.instanceId,
    "still attached",
  );
});

t.test("not ours any more: claimed by another instance after our detach, its tags are left to it", async (t) => {
  const { node, volumeId } = await bootedNode(t);
  const rival = node.fake.addInstance();
  // Between the detach and the tags, another boot claims the volume.
  node.script.before("cloud.waitForAttachment", async () => {
    await waitFor(async () => (await node.fake.describe(volumeId)).state === "available", "available");
    await node.fake.attach(volumeId, rival);
    await node.fake.direct.tagVolume(volumeId, { [VolumeTag.claimedBy]: rival.instanceId });
  });
  const outcome = await release(node);
  t.equal(outcome.report?.outcome, "released");
  const volume = await node.fake.describe(volumeId);
  t.equal(volume.attachment?.instanceId, rival.instanceId, "the rival holds it");
  t.equal(volume.tags[VolumeTag.claimedBy], rival.instanceId, "its claim untouched");
  t.equal(volume.tags[VolumeTag.expiresAt], undefined, "no expiry written over its claim");
});

t.test("a stop (instance stopping): unmounted and kept attached, no expiry", async (t) => {
  const { node, volumeId } = await bootedNode(t);
  const asked: number[] = [];
  const config = { ...node.config, timeouts: { ...node.config.timeouts, imdsRequestSeconds: 3 } };
  const outcome = await runRelease(
    config,
    node.adapters({
      spotInstanceAction: async ({ timeoutMs }) => {
        asked.push(timeoutMs);
        return "stop";
      },
    }),
    { dryRun: false },
  );
  t.same(asked, [3000], "the notice asked once, given one IMDS answer's time");
  t.equal(outcome.report?.outcome, "released");
  t.same(outcome.report?.kept, [volumeId], "kept attached");
  const volume = await node.fake.describe(volumeId);
  t.equal(volume.attachment?.instanceId, node.instance.instanceId, "still attached here");
  t.equal(volume.tags[VolumeTag.expiresAt], undefined, "no expiry");
  t.same(node.host.mounted.get(node.host.deviceOf(volumeId)), [], "unmounted");
  t.equal(node.script.of("cloud.detachVolume").length, 0, "no DetachVolume");
});

t.test("a release killed between the detach and the tags: the next one writes the tags", async (t) => {
  const { node, volumeId } = await bootedNode(t);
  node.script.failNext("cloud.waitForAttachment", new Error("killed (scripted)"));
  const first = await release(node);
  t.equal(first.report?.outcome, "failed");
  await waitFor(async () => (await node.fake.describe(volumeId)).state === "available", "available");
  t.equal((await node.fake.describe(volumeId)).tags[VolumeTag.claimedBy], node.instance.instanceId, "still claimed");
  const second = await release(node);
  t.equal(second.report?.outcome, "released");
  const volume = await node.fake.describe(volumeId);
  t.equal(volume.tags[VolumeTag.claimedBy], undefined);
  t.ok(volume.tags[VolumeTag.expiresAt]);
});

t.test("stopped by SIGINT (Ctrl-C) before it starts: no step runs, the problem names SIGINT", async (t) => {
  const { node, volumeId } = await bootedNode(t);
  const stop = new AbortController();
  stop.abort(new StopSignalReceived("SIGINT"));
  const outcome = await runRelease(node.config, node.adapters(), { dryRun: false, signal: stop.signal });
  t.equal(outcome.exitCode, 1);
  t.match(outcome.report?.problems, [{ step: "sigterm", message: /^stopped by SIGINT before / }]);
  t.equal(node.script.of("cloud.detachVolume").length, 0, "no DetachVolume");
  t.equal((await node.fake.describe(volumeId)).attachment?.instanceId, node.instance.instanceId, "still attached");

  const unnamed = new AbortController();
  unnamed.abort();
  const again = await runRelease(node.config, node.adapters(), { dryRun: false, signal: unnamed.signal });
  t.match(again.report?.problems, [{ message: /^stopped by a signal \(SIGTERM or SIGINT\) before / }]);
});
