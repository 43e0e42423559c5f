/**
 * The boot path with a pool: a lab host claims a pool volume made from the golden snapshot and
 * docker runs the golden images straight from it; booting the same instance again (a re-run, a
 * reboot) reuses the attachment and keeps the node's swarm identity; the operator's other
 * daemon.json keys survive the boot.
 */
import t, { type Test } from "tap";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { orderCandidates } from "../../../src/agent/volume-rules.ts";
import { run } from "../../../src/exec.ts";
import { DATA_ROOT_SUBDIR } from "../../../src/layout.ts";
import { initSwarm } from "../../../src/lab/docker/images.ts";
import type { PrivateDockerd } from "../../../src/lab/docker/dockerd.ts";
import { VolumeTag } from "../../../src/tags.ts";
import {
  findmnt,
  GOLDEN_IMAGES,
  labelRecord,
  LABEL_PREFIX,
  POOL,
  startBootLab,
  withMounted,
  type InProcessBoot,
} from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-boot-pool", poolSize: 3 });
t.teardown(() => bl.close());
const overrides = { pool: POOL };

/** Fails with the agent's log attached, so a failed boot says why. */
function assertOutcome(t: Test, booted: InProcessBoot, outcome: string, message: string): void {
  t.equal(
    booted.report?.outcome,
    outcome,
    message,
    booted.report?.outcome === outcome ? {} : { result: booted.report, log: booted.log.join("\n") },
  );
}

/** Image events (pull, import, load, tag, …) the dockerd recorded since it started. */
async function imageEvents(dockerd: PrivateDockerd): Promise<string[]> {
  const until = String(Math.floor(Date.now() / 1000));
  const { stdout } = await dockerd.docker([
    "events",
    "--since",
    "0",
    "--until",
    until,
    "--filter",
    "type=image",
    "--format",
    "{{.Action}} {{.Actor.ID}}",
  ]);
  return stdout.split("\n").filter(Boolean);
}

async function nodeLabels(dockerd: PrivateDockerd): Promise<Record<string, string>> {
  const { stdout } = await dockerd.docker(["node", "inspect", "self", "--format", "{{json .Spec.Labels}}"]);
  return (JSON.parse(stdout) as Record<string, string> | null) ?? {};
}

t.test(
  "boot with a pool volume: attached, mounted, docker runs the golden images from it (no pull or load), ready " +
    "label, claim tags",
  async (t) => {
    const host = await bl.addHost();
    const instanceId = host.instance.instanceId;
    // The agent orders candidates by a hash of the instance id: this is the volume it claims.
    const expected = orderCandidates(instanceId, bl.poolVolumes)[0]!;

    // What the volume holds before any docker of this host sees it: the image ids and layer files.
    const before = await bl.withVolume(expected, (device, helper) =>
      withMounted(device, join(helper.paths.mountRoot, "inspect"), async (mnt) => {
        const dataRoot = join(mnt, DATA_ROOT_SUBDIR);
        const repositories = JSON.parse(await readFile(join(dataRoot, "image/overlay2/repositories.json"), "utf8")) as {
          Repositories: Record<string, Record<string, string>>;
        };
        const ids = Object.fromEntries(
          GOLDEN_IMAGES.map(({ tag }) => [tag, repositories.Repositories[tag.split(":")[0]!]?.[tag]]),
        );
        const payloads: string[] = [];
        for (const layer of await readdir(join(dataRoot, "overlay2"))) {
          const files = await readdir(join(dataRoot, "overlay2", layer, "diff", "payload")).catch(() => []);
          payloads.push(...files.map((file) => `${layer}/${file}`));
        }
        return { ids, payloads };
      }),
    );
    t.ok(
      Object.values(before.ids).every((id) => /^sha256:[0-9a-f]{64}$/.test(id ?? "")),
      "the golden volume lists both images",
      before.ids,
    );
    t.equal(
      before.payloads.length,
      GOLDEN_IMAGES.length,
      "each image's payload layer is on the volume before docker starts",
    );

    const bootStarted = new Date();
    const booted = await bl.boot(host, { overrides });
    assertOutcome(t, booted, "ready", "outcome ready");
    t.equal(booted.exitCode, 0, "exit code 0");
    const result = booted.report!;
    t.equal(booted.plan.selection.source, "pool", "the plan takes a pool volume");
    t.equal(result.volumeId, expected, "the first volume of this instance's order is claimed");
    t.same(bl.attachCalls(instanceId), [expected], "one AttachVolume, for that volume");

    const volume = await bl.describe(expected);
    t.equal(volume.State, "in-use");
    t.equal(volume.Attachments?.[0]?.InstanceId, instanceId, "EC2 shows it attached to this instance");
    t.equal(volume.Attachments?.[0]?.State, "attached");
    t.equal(volume.Attachments?.[0]?.DeleteOnTermination, false, "DeleteOnTermination stays false");
    const tags = await bl.tags(expected);
    t.equal(tags[VolumeTag.claimedBy], instanceId, "claimed-by names this instance");
    const claimedAt = Date.parse(tags[VolumeTag.claimedAt] ?? "");
    t.ok(
      Number.isFinite(claimedAt) && claimedAt >= bootStarted.getTime() - 1000,
      "claimed-at is the time of this boot",
      { claimedAt: tags[VolumeTag.claimedAt] },
    );

    const mountPoint = join(host.paths.mountRoot, expected);
    t.equal(result.mountPoint, mountPoint, "mounted at <mountRoot>/<volume id>");
    const device = bl.lab.backend
      .attachments()
      .find((a) => a.volumeId === expected && a.instanceId === instanceId)?.device;
    t.ok(device, "the lab made the volume's device on this host");
    const mounted = await findmnt(mountPoint);
    t.equal(mounted?.source, device, "findmnt shows the volume's device at the mount point");
    t.equal(mounted?.fsType, "xfs");
    t.ok(mounted?.options.split(",").includes("noatime"), "mounted noatime", { options: mounted?.options });

    const dockerd = host.dockerd!;
    t.ok(dockerd, "the agent started the host's docker");
    const info = await dockerd.info();
    t.equal(info.DockerRootDir, join(mountPoint, DATA_ROOT_SUBDIR), "docker info: DockerRootDir on the volume");
    t.equal(result.dataRoot, info.DockerRootDir);
    const labels = labelRecord(info.Labels);
    t.equal(labels[`${LABEL_PREFIX}.state`], "ready", "docker info Labels: state=ready");
    t.equal(labels[`${LABEL_PREFIX}.volume-id`], expected, "docker info Labels: the volume id");

    // No pull or load: the images are the ones the golden build made, created before this boot,
    // and the daemon recorded no image event at all since it started.
    for (const { tag } of GOLDEN_IMAGES) {
      const [id, created] = (await dockerd.docker(["image", "inspect", "--format", "{{.Id}} {{.Created}}", tag])).stdout
        .trim()
        .split(" ");
      t.equal(id, before.ids[tag], `${tag}: the image id found on the volume before docker started`);
      t.ok(Date.parse(created ?? "") < bootStarted.getTime(), `${tag}: created before this boot (${created})`);
    }
    t.same(await imageEvents(dockerd), [], "no image event (pull, load, import) since docker started");
    const upper = (
      await dockerd.docker(["image", "inspect", "--format", "{{.GraphDriver.Data.UpperDir}}", "lab/app:1"])
    ).stdout.trim();
    t.ok(upper.startsWith(`${info.DockerRootDir}/overlay2/`), "the image's layer lives in the volume's data-root", {
      upper,
    });

    const ran = await dockerd.docker(["run", "--rm", "--network", "none", "lab/app:1", "echo", "ok"]);
    t.equal(ran.stdout.trim(), "ok", "docker run --rm --network none lab/app:1 echo ok");
    const payload = await dockerd.docker(["run", "--rm", "--network", "none", "lab/app:1", "ls", "/payload"]);
    t.match(payload.stdout, /blob-000\.bin/, "the container sees the payload from the volume");

    // The event check above is not blind: an image change shows up in the same query.
    await dockerd.docker(["tag", "lab/app:1", "lab/app:copy"]);
    t.ok(
      await pollUntil(async () => (await imageEvents(dockerd)).some((event) => event.startsWith("tag ")), 10_000),
      "a docker tag is seen as an image event",
    );
    await dockerd.docker(["rmi", "lab/app:copy"]);
  },
);

t.test(
  "boot again on the same instance (a re-run, then a reboot): no second AttachVolume, same volume, swarm identity kept",
  async (t) => {
    const host = await bl.addHost();
    const instanceId = host.instance.instanceId;
    const first = await bl.boot(host, { overrides });
    assertOutcome(t, first, "ready", "first boot ready");
    const volumeId = first.report!.volumeId!;
    const attachment = () => bl.lab.ec2.snapshotState().volumes[volumeId]?.attachment;
    const firstAttachment = attachment();
    t.equal(firstAttachment?.instanceId, instanceId);

    const dockerd = host.dockerd!;
    const nodeId = await initSwarm(dockerd);
    t.match(nodeId, /^[a-z0-9]{25}$/, "this node is a swarm manager");
    const pid = dockerd.pid;

    // A re-run with everything up (systemd restarted the agent): nothing to redo.
    const rerun = await bl.boot(host, { overrides });
    assertOutcome(t, rerun, "ready", "re-run ready");
    t.equal(rerun.plan.selection.source, "attached", "re-run: the attached volume is reused");
    t.notOk(
      rerun.plan.steps.some((s) => s.step === "claim-volume" || s.step === "create-and-claim"),
      "re-run: no claim in the plan",
    );
    t.equal(rerun.report?.volumeId, volumeId, "re-run: same volume");
    t.equal(rerun.report?.mountPoint, first.report?.mountPoint, "re-run: same mount point");
    t.equal(dockerd.pid, pid, "re-run: docker already on the volume is not restarted");
    t.equal(
      (await nodeLabels(dockerd))[`${LABEL_PREFIX}.state`],
      "ready",
      "re-run: on a swarm manager the agent labels its own node",
    );

    // A reboot: docker is down and the mount is gone, while EC2 keeps the attachment.
    await dockerd.stop();
    await run("umount", [first.report!.mountPoint!]);
    t.notOk(await findmnt(first.report!.mountPoint!), "after the reboot nothing is mounted");
    const reboot = await bl.boot(host, { overrides });
    assertOutcome(t, reboot, "ready", "boot after the reboot ready");
    t.equal(reboot.plan.selection.source, "attached", "reboot: the attached volume is reused");
    t.equal(reboot.report?.volumeId, volumeId, "reboot: same volume");
    t.equal(reboot.report?.dataRoot, first.report?.dataRoot, "reboot: same data-root");
    t.ok(await findmnt(first.report!.mountPoint!), "reboot: mounted again");

    t.same(bl.attachCalls(instanceId), [volumeId], "one AttachVolume over three boots");
    const lastAttachment = attachment();
    t.equal(lastAttachment?.token, firstAttachment?.token, "the attachment is the first boot's (not a new one)");
    t.equal(lastAttachment?.attachTime, firstAttachment?.attachTime, "attach time unchanged");
    t.equal(lastAttachment?.state, "attached");

    const info = await dockerd.info();
    t.equal(info.DockerRootDir, first.report?.dataRoot, "docker runs on the volume again");
    t.ok(
      await pollUntil(async () => (await dockerd.info()).Swarm.LocalNodeState === "active", 60_000),
      "the swarm comes back",
    );
    t.equal((await dockerd.info()).Swarm.NodeID, nodeId, "same swarm node id: the node's swarm state was kept");
    // Node labels when the manager answered at once, engine labels while its swarm was starting.
    const published = reboot.log.find((line) => /^<\d>labels\.publish: (node|engine) labels set/.test(line)) ?? "";
    const labels = published.includes("node labels")
      ? await nodeLabels(dockerd)
      : labelRecord((await dockerd.info()).Labels);
    t.equal(labels[`${LABEL_PREFIX}.state`], "ready", "state=ready published after the reboot", { published });
    const ran = await dockerd.docker(["run", "--rm", "--network", "none", "lab/tool:1", "echo", "ok"]);
    t.equal(ran.stdout.trim(), "ok", "the golden images still run");
  },
);

t.test("daemon.json keeps the operator's other keys (log-driver, log-opts, labels) after boot", async (t) => {
  const host = await bl.addHost();
  const original = {
    "data-root": host.paths.defaultDataRoot,
    "log-driver": "json-file",
    "log-opts": { "max-size": "10m", "max-file": "3" },
    labels: ["a=b"],
  };
  await writeFile(host.paths.daemonJson, JSON.stringify(original, null, 2) + "\n");
  const booted = await bl.boot(host, { overrides });
  assertOutcome(t, booted, "ready", "outcome ready");

  const after = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
  t.equal(after["data-root"], booted.report?.dataRoot, "data-root points at the volume");
  t.equal(after["log-driver"], "json-file", "log-driver kept");
  t.same(after["log-opts"], original["log-opts"], "log-opts kept");
  const labels = after.labels as string[];
  t.equal(labels[0], "a=b", "the operator's label kept, in its place");
  t.ok(labels.includes(`${LABEL_PREFIX}.state=ready`), "the agent's label added beside it");
  t.same(Object.keys(after).slice(0, 4), Object.keys(original), "keys keep their order");

  const info = await host.dockerd!.info();
  t.equal(info.LoggingDriver, "json-file", "dockerd runs with the operator's log driver");
  t.ok(
    info.Labels.includes("a=b") && info.Labels.includes(`${LABEL_PREFIX}.state=ready`),
    "docker info shows both labels",
    { labels: info.Labels },
  );
});

t.test("the lab closes and leaves no loop device, mount or dockerd behind", async (t) => {
  const left = await bl.close();
  t.same(left, { rootExists: false, loopDevices: [], mounts: [], dockerds: [] });
});
