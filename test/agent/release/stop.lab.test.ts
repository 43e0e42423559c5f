/**
 * Stop is not terminate, on the lab: the release runs while the instance is `stopping` /
 * `shutting-down` (the EC2 emulator's shutdown hook stands for the OS's shutdown, after
 * docker.service stopped) and asks EC2 which it is.
 * - stopping (an osparc warm buffer): docker stopped, the filesystem cleanly unmounted, labels
 *   withdrawn, daemon.json reset, the volume still attached with no expiry and still claimed;
 *   the next start reuses it with no AttachVolume and docker finds its images, while the start
 *   is a new tenant: the previous activation's containers and named volumes are gone (a reboot
 *   of one activation keeps them);
 * - shutting-down: the full release, as before;
 * - the state unknown (DescribeInstances failing) while the instance in fact stops: the full
 *   release (a volume is never stranded without an expiry on a machine that may go away);
 * - a spot interruption notice `stop` while EC2 still says running: kept attached.
 */
import t, { type Test } from "tap";
import { readFile } from "node:fs/promises";
import { run } from "../../../src/exec.ts";
import {
  DescribeInstancesCommand,
  StartInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import type { LabHost } from "../../../src/lab/lab.ts";
import { VolumeTag } from "../../../src/tags.ts";
import {
  GOLDEN_IMAGES,
  labelRecord,
  LABEL_PREFIX,
  mountsUnder,
  POOL,
  startBootLab,
  type Ec2Call,
} from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";
import {
  mutatingCalls,
  releaseCli,
  releaseHost,
  volumeEnd,
  type InProcessRelease,
} from "../../fixtures/lab/lifecycle-lab.ts";
import { assertOutcome, ISO_TIME } from "../../fixtures/lab/lifecycle-lab.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-lifecycle-stop", poolSize: 4 });
t.teardown(() => bl.close());
const overrides = { pool: POOL };

async function instanceState(instanceId: string): Promise<string | undefined> {
  const out = await bl.ec2.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] }));
  return out.Reservations?.[0]?.Instances?.[0]?.State?.Name;
}
async function reached(instanceId: string, state: string): Promise<boolean> {
  return pollUntil(async () => (await instanceState(instanceId)) === state);
}

/** Boots a fresh host on a pool volume. */
async function bootedHost(t: Test): Promise<{ host: LabHost; volumeId: string; mountPoint: string }> {
  const host = await bl.addHost({});
  const booted = await bl.boot(host, { overrides });
  assertOutcome(t, booted, "ready", "boot: ready");
  return { host, volumeId: booted.report!.volumeId!, mountPoint: booted.report!.mountPoint! };
}

/**
 * What the instance's OS does at shutdown: systemd stops docker.service, then the agent's
 * release runs (its ExecStop). The hook records the release and what EC2 said meanwhile.
 */
function releaseAtShutdown(host: LabHost, before?: () => Promise<void>) {
  const seen: { release?: InProcessRelease; stateDuring?: string | undefined; dryRun?: string; calls?: Ec2Call[] } = {};
  bl.lab.ec2.setShutdownHook(host.instance.instanceId, async () => {
    await host.dockerd?.stop();
    seen.stateDuring = await instanceState(host.instance.instanceId);
    await before?.();
    const from = bl.calls.length;
    seen.release = await releaseHost(bl, host);
    seen.calls = bl.calls.slice(from);
  });
  return seen;
}

/**
 * What a tenant's service leaves on the node: a docker volume holding a file, and a container (restarted with docker)
 * using it.
 */
async function tenantState(host: LabHost, name: string): Promise<void> {
  const docker = host.dockerd!;
  await docker.docker(["volume", "create", name]);
  await docker.docker([
    "run",
    "--rm",
    "--network",
    "none",
    "-v",
    `${name}:/data`,
    GOLDEN_IMAGES[0]!.tag,
    "sh",
    "-c",
    `echo ${name} > /data/file`,
  ]);
  await docker.docker([
    "run",
    "-d",
    "--name",
    `svc-${name}`,
    "--restart",
    "always",
    "--stop-timeout",
    "1",
    "--network",
    "none",
    "-v",
    `${name}:/data`,
    GOLDEN_IMAGES[0]!.tag,
    "sleep",
    "100000",
  ]);
}

/** The named volumes and containers docker shows. */
async function dockerState(host: LabHost): Promise<{ volumes: string[]; containers: string[] }> {
  const lines = async (args: string[]) =>
    (await host.dockerd!.docker(args)).stdout.split("\n").filter((line) => line !== "");
  return {
    volumes: await lines(["volume", "ls", "--format", "{{.Name}}"]),
    containers: await lines(["ps", "-a", "--format", "{{.Names}}"]),
  };
}

/** The file the tenant's service wrote into its docker volume, read by a new container. */
async function fileIn(host: LabHost, name: string): Promise<string> {
  return (
    await host.dockerd!.docker([
      "run",
      "--rm",
      "--pull=never",
      "--network",
      "none",
      "-v",
      `${name}:/data`,
      GOLDEN_IMAGES[0]!.tag,
      "cat",
      "/data/file",
    ])
  ).stdout.trim();
}

t.test(
  "a stop (warm buffer): unmounted, left attached and claimed with no expiry; the start reuses it with no " +
    "AttachVolume, a new tenant: images kept, the previous activation's containers and named volumes gone",
  async (t) => {
    const { host, volumeId, mountPoint } = await bootedHost(t);
    const id = host.instance.instanceId;
    await tenantState(host, "work");

    // A reboot of this activation (no StartInstances: the same LaunchTime) keeps the node's state.
    await host.dockerd!.stop();
    await run("umount", [mountPoint]);
    const rebooted = await bl.boot(host, { overrides });
    assertOutcome(t, rebooted, "ready", "the boot after a reboot: ready");
    t.equal(rebooted.report?.volumeId, volumeId, "on the same volume");
    t.ok(
      rebooted.log.some((line) => /data-root already prepared for this activation/.test(line)),
      "prepared already for this activation",
      { log: rebooted.log },
    );
    t.match(
      await dockerState(host),
      { volumes: ["work"], containers: ["svc-work"] },
      "the reboot keeps the docker volume and the container",
    );
    t.equal(await fileIn(host, "work"), "work", "and the docker volume's file");

    const seen = releaseAtShutdown(host, async () => {
      const dry = await releaseCli(bl, host, ["--dry-run"]);
      seen.dryRun = dry.stdout + dry.stderr;
    });
    const calls = bl.calls.length;
    await bl.ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    t.ok(await reached(id, "stopped"), "the instance reaches stopped once its shutdown (the release) is done");
    t.equal(seen.stateDuring, "stopping", "the release ran while EC2 showed the instance stopping");
    t.match(
      seen.dryRun,
      /^shutdown: stop \(EC2 shows the instance 'stopping'\)$/m,
      "release --dry-run shows the decision and why",
    );
    t.match(seen.dryRun, /\d+\. keep-attached/, "and the keep-attached step");
    t.notMatch(seen.dryRun, /\d+\. detach/, "and no detach");

    const released = seen.release!;
    assertOutcome(t, released, "released", "the release succeeded");
    t.equal(released.exitCode, 0);
    t.equal(released.plan.shutdown.kind, "stop");
    t.same(
      released.plan.steps.map((s) => s.step),
      ["withdraw-labels", "reset-data-root", "sync", "unmount", "keep-attached"],
    );
    t.same(released.report?.kept, [volumeId], "kept");
    t.same(released.report?.released, [], "nothing released");
    t.ok(
      released.log.some((line) =>
        /^<5>release\.shutdown: the instance is being stopped.*why="?EC2 shows the instance 'stopping'/.test(line),
      ),
      "one clear log line: stop, and why",
      { log: released.log },
    );
    t.same(mutatingCalls(bl, calls), [], "no DetachVolume, no tag written");

    const end = await volumeEnd(bl, volumeId);
    t.equal(end.state, "in-use", "the volume stays in use");
    t.same(end.attachments, [`attached ${id}`], "attached to the stopped instance");
    t.equal(end.forceDetachCount, 0);
    t.notOk(end.tags[VolumeTag.releasedAt], "no released-at");
    t.notOk(end.tags[VolumeTag.expiresAt], "no expires-at");
    t.equal(end.tags[VolumeTag.claimedBy], id, "still claimed-by this instance");
    t.same(await mountsUnder(host.paths.mountRoot), [], "cleanly unmounted");
    t.ok(
      bl.lab.backend.attachments().some((a) => a.volumeId === volumeId && a.instanceId === id),
      "its device stays, as on EC2",
    );
    const daemon = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
    t.equal(daemon["data-root"], host.paths.defaultDataRoot, "daemon.json data-root reset");
    t.same(daemon.labels, [], "labels withdrawn");

    // The warm buffer is activated: started (a new LaunchTime: a new activation), then booted.
    await bl.ec2.send(new StartInstancesCommand({ InstanceIds: [id] }));
    t.ok(await reached(id, "running"), "started");
    const attachesBefore = bl.attachCalls(id).length;
    const booted = await bl.boot(host, { overrides });
    assertOutcome(t, booted, "ready", "the boot after the start: ready");
    t.equal(booted.report?.volumeId, volumeId, "on the same volume");
    t.equal(booted.report?.mountPoint, mountPoint);
    t.equal(bl.attachCalls(id).length - attachesBefore, 0, "with no AttachVolume");
    t.ok(
      booted.log.some((line) =>
        /machine-local state removed from the data-root: prepared in an earlier activation of this instance/.test(line),
      ),
      "prepared as for a new tenant",
      { log: booted.log },
    );
    t.same(
      await dockerState(host),
      { volumes: [], containers: [] },
      "the previous activation's docker volume and container are gone",
    );
    const images = (await host.dockerd!.docker(["images", "--format", "{{.Repository}}:{{.Tag}}"])).stdout.split("\n");
    for (const image of GOLDEN_IMAGES) {
      t.ok(images.includes(image.tag), `docker finds ${image.tag}`);
      const ran = await host.dockerd!.docker([
        "run",
        "--rm",
        "--pull=never",
        "--network",
        "none",
        image.tag,
        "echo",
        "ok",
      ]);
      t.equal(ran.stdout.trim(), "ok", `${image.tag} runs from the volume (--pull=never)`);
    }
    t.equal(labelRecord((await host.dockerd!.info()).Labels)[`${LABEL_PREFIX}.state`], "ready", "ready again");
    const claimed = await volumeEnd(bl, volumeId);
    t.equal(claimed.tags[VolumeTag.claimedBy], id);
    t.notOk(claimed.tags[VolumeTag.expiresAt]);

    bl.lab.ec2.setShutdownHook(id, undefined);
  },
);

t.test(
  "osparc's usual instance (no tags in instance metadata): the release's one DescribeInstances gives both the " +
    "tags and the state",
  async (t) => {
    const host = await bl.addHost({ metadataTags: false });
    const booted = await bl.boot(host, { overrides });
    assertOutcome(t, booted, "ready", "boot: ready");
    const volumeId = booted.report!.volumeId!;
    const id = host.instance.instanceId;
    const seen = releaseAtShutdown(host);
    await bl.ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    // Not polling EC2 meanwhile: the calls made during the release are the agent's own.
    t.ok(await pollUntil(async () => seen.calls !== undefined), "the release ran");
    t.ok(await reached(id, "stopped"), "stopped");
    const released = seen.release!;
    assertOutcome(t, released, "released", "released");
    t.equal(released.identity.tagsSource, "ec2", "the tags came from EC2");
    t.equal(released.plan.shutdown.kind, "stop");
    t.same(released.report?.kept, [volumeId]);
    t.same(
      seen.calls!.map((c) => c.command).filter((c) => c === "DescribeInstancesCommand"),
      ["DescribeInstancesCommand"],
      "one DescribeInstances for the whole release",
    );
    bl.lab.ec2.setShutdownHook(id, undefined);
  },
);

t.test("a terminate (shutting-down): the full release, as before", async (t) => {
  const { host, volumeId } = await bootedHost(t);
  const id = host.instance.instanceId;
  const seen = releaseAtShutdown(host);
  await bl.ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
  t.ok(await reached(id, "terminated"), "terminated once its shutdown is done");
  t.equal(seen.stateDuring, "shutting-down");
  const released = seen.release!;
  assertOutcome(t, released, "released", "released");
  t.equal(released.plan.shutdown.kind, "terminate");
  t.match(released.plan.shutdown.reason, /'shutting-down'/);
  t.same(
    released.plan.steps.map((s) => s.step),
    ["withdraw-labels", "reset-data-root", "sync", "unmount", "detach", "wait-detached", "tag-released"],
  );
  t.same(released.report?.released, [volumeId]);
  const end = await volumeEnd(bl, volumeId);
  t.equal(end.state, "available");
  t.same(end.attachments, []);
  t.equal(end.forceDetachCount, 0);
  t.match(end.tags[VolumeTag.releasedAt], ISO_TIME);
  t.ok(end.tags[VolumeTag.expiresAt], "expires-at");
  t.notOk(end.tags[VolumeTag.claimedBy], "claim removed");
});

t.test(
  "the state cannot be learned (DescribeInstances failing) while the instance in fact stops: the full release",
  async (t) => {
    const { host, volumeId } = await bootedHost(t);
    const id = host.instance.instanceId;
    const seen = releaseAtShutdown(host, async () => {
      bl.lab.ec2.setFaults({ actions: { DescribeInstances: { throttleRate: 1 } } });
    });
    await bl.ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    await pollUntil(async () => seen.release !== undefined);
    bl.lab.ec2.setFaults({});
    t.ok(await reached(id, "stopped"), "stopped");
    const released = seen.release!;
    assertOutcome(t, released, "released", "released");
    t.equal(released.plan.shutdown.kind, "unknown");
    t.match(released.plan.shutdown.reason, /could not be learned/);
    t.ok(
      released.log.some((line) =>
        /^<5>release\.shutdown: whether the instance stops or terminates is unknown: full release/.test(line),
      ),
      "says so in the log",
    );
    const end = await volumeEnd(bl, volumeId);
    t.equal(end.state, "available", "detached");
    t.ok(end.tags[VolumeTag.expiresAt], "with its expiry");
    bl.lab.ec2.setShutdownHook(id, undefined);
  },
);

t.test(
  "a spot interruption notice 'stop' while EC2 still shows running: kept attached; 'terminate': released",
  async (t) => {
    const { host, volumeId } = await bootedHost(t);
    await host.dockerd!.stop();
    host.imds.setSpotInstanceAction({ action: "stop", time: "2030-01-01T12:00:00Z" });
    const kept = await releaseHost(bl, host);
    assertOutcome(t, kept, "released", "release with the notice");
    t.equal(kept.plan.shutdown.kind, "stop");
    t.match(kept.plan.shutdown.reason, /spot interruption notice says 'stop'/);
    t.same(kept.report?.kept, [volumeId]);
    t.equal((await volumeEnd(bl, volumeId)).state, "in-use", "still attached");

    host.imds.setSpotInstanceAction({ action: "terminate", time: "2030-01-01T12:00:00Z" });
    const released = await releaseHost(bl, host);
    assertOutcome(t, released, "released", "release with a terminate notice");
    t.equal(released.plan.shutdown.kind, "terminate");
    t.same(released.report?.released, [volumeId]);
    t.equal((await volumeEnd(bl, volumeId)).state, "available");
  },
);
