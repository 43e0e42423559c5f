/**
 * The background refresh against a real registry (Debian's docker-registry, a private process in
 * the lab host's dockerd namespace): a pool whose current generation lists an image the pool
 * volume lacks and one the registry does not have. After `ready` the boot hands over to the
 * refresh, which pulls the first through the host's dockerd, fails the second with a warning, and
 * leaves readiness, the boot's exit code and the volume's generation tags as they were; `status
 * --json` (a process, checked against its schema) and the metrics show it. Once the registry
 * holds the second image too, `ebs-cache-agent refresh` (a process) pulls it and tags the volume
 * as the current generation. SIGTERM stops a pull that hangs; the release that follows is not
 * held up.
 */
import t from "tap";
import { existsSync } from "node:fs";
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { CreateSnapshotCommand, waitUntilSnapshotCompleted } from "@aws-sdk/client-ec2";
import { Ajv } from "ajv";
import { execa } from "execa";
import type { RefreshOutcome } from "../../../src/agent/refresh/run.ts";
import { bootLabHost, refreshLabHost, releaseLabHost, writeLabConfig } from "../../../src/lab/machines/agent.ts";
import { poolTags } from "../../../src/lab/volumes/golden.ts";
import { buildImage } from "../../../src/lab/docker/images.ts";
import {
  freeLoopbackPort,
  labRegistryNetns,
  REGISTRY_BIN,
  startLabRegistry,
  type LabRegistry,
} from "../../../src/lab/docker/registry.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import {
  GOLDEN_IMAGES,
  IMAGE_SET,
  labelRecord,
  LABEL_PREFIX,
  POOL,
  startBootLab,
} from "../../fixtures/lab/boot-lab.ts";
import {
  assertDockerPrerequisites,
  assertLabPrerequisites,
  childEnv,
  pollUntil,
} from "../../fixtures/lab/lab-prereq.ts";
import { LAB_WAIT } from "../../../src/lab/volumes/volumes.ts";

await assertLabPrerequisites();
assertDockerPrerequisites("test/agent/refresh/refresh.lab.test.ts");
if (!existsSync(REGISTRY_BIN))
  throw new Error(`${REGISTRY_BIN} is missing: apt-get install -y docker-registry (scripts/setup.sh)`);

const REPO = fileURLToPath(new URL("../../..", import.meta.url));
const MAIN = join(REPO, "src/cli.ts");
const MiB = 1024 * 1024;
const schema = JSON.parse(
  await readFile(new URL("../../../schema/status.schema.json", import.meta.url), "utf8"),
) as object;
const validateStatus = new Ajv({ allErrors: true, strict: true }).compile(schema);

const bl = await startBootLab({ name: "test-refresh", poolSize: 1 });
const registries: LabRegistry[] = [];
t.teardown(async () => {
  for (const registry of registries) await registry.stop();
  await bl.close();
});

t.test(
  "after ready: the missing image is pulled, a failing pull changes nothing else; by hand later, the volume " +
    "becomes current",
  async (t) => {
    const log = createMemoryLogger("debug");
    const host = await bl.addHost();
    const work = join(host.paths.hostRoot, "registry");
    await mkdir(work, { recursive: true });
    const port = await freeLoopbackPort();
    const storage = join(work, "storage");
    const serve = async () => {
      // dockerd gets a new namespace at each start: the registry follows it, with the same blobs.
      for (const running of registries.splice(0)) await running.stop();
      const registry = await startLabRegistry({
        labRoot: bl.lab.root,
        dir: work,
        storage,
        netns: labRegistryNetns(host),
        port,
        log,
      });
      registries.push(registry);
      return registry;
    };
    const fresh = `127.0.0.1:${port}/lab/fresh:1`;
    const later = `127.0.0.1:${port}/lab/later:1`;

    // The registry holds `fresh`, made on this host before its boot: the pool volume never saw it.
    await host.startDocker();
    await serve();
    await buildImage(host.dockerd!, { tag: fresh, workDir: work, payloadBytes: 1 * MiB, log });
    await host.dockerd!.docker(["push", fresh]);
    await host.dockerd!.docker(["rmi", fresh]);

    // The pool's current generation: a newer snapshot listing the golden's images, `fresh` and `later`.
    const blank = await bl.createBlankVolume({});
    const builtAt = new Date().toISOString();
    const images = [...GOLDEN_IMAGES.map((i) => i.tag), fresh, later];
    const snapshotTags = { ...poolTags(POOL, IMAGE_SET, images, bl.golden!.built), [VolumeTag.builtAt]: builtAt };
    const created = await bl.ec2.send(
      new CreateSnapshotCommand({
        VolumeId: blank,
        TagSpecifications: [
          { ResourceType: "snapshot", Tags: Object.entries(snapshotTags).map(([Key, Value]) => ({ Key, Value })) },
        ],
      }),
    );
    await waitUntilSnapshotCompleted({ client: bl.ec2, ...LAB_WAIT }, { SnapshotIds: [created.SnapshotId!] });

    const overrides = {
      pool: POOL,
      labels: { mode: "engine" },
      refresh: { enabled: true, concurrency: 2, pullSeconds: 120 },
    };
    let refreshing: Promise<RefreshOutcome> | undefined;
    const booted = await bootLabHost(bl.lab, host, {
      overrides,
      log,
      // What the detached `ebs-cache-agent refresh --background` does on a host, in this process.
      startRefresh: async () => {
        await serve();
        refreshing = refreshLabHost(bl.lab, host, { overrides, log });
      },
    });
    t.equal(
      booted.report?.outcome,
      "ready",
      "the boot is ready",
      booted.report?.outcome === "ready" ? {} : { log: log.lines.join("\n") },
    );
    t.equal(booted.exitCode, 0);
    const volumeId = booted.report!.volumeId!;
    t.ok(bl.poolVolumes.includes(volumeId), "the pool volume of the older generation was claimed");
    t.ok(refreshing, "the boot handed over to the refresh after ready");
    const outcome = await refreshing!;
    const state = outcome.state!;
    t.equal(state.phase, "done");
    t.equal(state.generation, `${IMAGE_SET}@${builtAt}`);
    const byImage = Object.fromEntries(state.images.map((i) => [i.image, i]));
    t.equal(byImage[fresh]?.phase, "pulled", "the image the volume lacked was pulled", {
      log: log.lines.filter((l) => l.includes("refresh.")).join("\n"),
    });
    t.ok((byImage[fresh]?.bytes ?? 0) > MiB, "with its size as docker reports it");
    t.equal(byImage[later]?.phase, "failed", "the image the registry lacks failed");
    t.match(byImage[later]?.error, /docker pull/);
    for (const golden of GOLDEN_IMAGES)
      t.equal(byImage[golden.tag]?.phase, "present", `${golden.tag} was there already`);
    t.equal(state.markedCurrent, false, "one image of the generation is missing: the volume keeps its tags");
    t.ok(
      log.lines.some((l) => /^<6>refresh\.pull: pulling 1 of 2: /.test(l)),
      "progress in the log: n of m",
    );
    t.ok(
      log.lines.some((l) => /^<4>refresh\.pull-failed/.test(l)),
      "the failed pull is a warning",
    );

    const { stdout: listed } = await host.dockerd!.docker(["images", "--format", "{{.Repository}}:{{.Tag}}"]);
    t.ok(listed.split("\n").includes(fresh), "docker on the volume lists the pulled image");
    const { stdout: info } = await host.dockerd!.docker(["info", "--format", "{{json .Labels}}"]);
    t.equal(
      labelRecord((JSON.parse(info) as string[] | null) ?? [])[`${LABEL_PREFIX}.state`],
      "ready",
      "readiness stays ready",
    );
    t.not(
      (await bl.tags(volumeId))[VolumeTag.builtAt],
      builtAt,
      "the volume keeps its own generation: the current one's build time was not written",
    );

    const config = await writeLabConfig(bl.lab, host, overrides);
    const status = await execa(process.execPath, [MAIN, "status", "--json", "--config", config], {
      cwd: REPO,
      env: childEnv(),
      extendEnv: false,
      reject: false,
    });
    const doc = JSON.parse(status.stdout) as { healthy: boolean; warnings: string[]; refresh: Record<string, unknown> };
    t.ok(validateStatus(doc), "status --json follows its schema", { errors: validateStatus.errors });
    t.equal(status.exitCode, 0, "a failed pull does not make the host unhealthy", { stderr: status.stderr });
    t.match(doc.refresh, {
      phase: "done",
      running: false,
      wanted: images.length,
      present: 2,
      pulled: 1,
      failed: 1,
      pending: 0,
      markedCurrent: false,
    });
    t.ok(
      doc.warnings.some((w) => w.includes(later)),
      "the failed image is a warning of the status",
    );
    const metrics = await readFile(
      join(host.paths.hostRoot, "var/lib/prometheus/node-exporter/ebs_cache_agent_refresh.prom"),
      "utf8",
    );
    t.match(metrics, /ebs_cache_agent_refresh_images\{phase="pulled"\} 1/);
    t.match(metrics, /ebs_cache_agent_refresh_images\{phase="failed"\} 1/);

    // The registry gets `later`; the refresh by hand (a process) pulls it and tags the volume current.
    await buildImage(host.dockerd!, { tag: later, workDir: work, payloadBytes: 1 * MiB, log });
    await host.dockerd!.docker(["push", later]);
    await host.dockerd!.docker(["rmi", later]);
    const dry = await execa(process.execPath, [MAIN, "refresh", "--dry-run", "--json", "--config", config], {
      cwd: REPO,
      env: childEnv(),
      extendEnv: false,
      reject: false,
    });
    t.equal(dry.exitCode, 0, "refresh --dry-run", { stderr: dry.stderr });
    const dryPlan = JSON.parse(dry.stdout) as {
      plan: { steps: Array<{ step: string; image?: string }> };
      state: unknown;
    };
    t.same(
      dryPlan.plan.steps.map((s) => s.image ?? s.step),
      [later, "mark-current"],
      "the dry run plans the pull and the tag",
    );
    t.equal(dryPlan.state, null, "and does nothing");
    const byHand = await execa(process.execPath, [MAIN, "refresh", "--json", "--config", config], {
      cwd: REPO,
      env: childEnv(),
      extendEnv: false,
      reject: false,
    });
    t.equal(byHand.exitCode, 0, "refresh by hand", { stderr: byHand.stderr });
    t.match(JSON.parse(byHand.stdout), { state: { phase: "done", markedCurrent: true } });
    const tags = await bl.tags(volumeId);
    t.equal(tags[VolumeTag.builtAt], builtAt, "the volume carries the current generation's build time");
    t.equal(tags[VolumeTag.images], images.join(","), "and its image list");

    // SIGTERM (the boot unit stopped at shutdown): a pull that hangs (a registry that accepts and
    // never answers, named by osparc's pre_pulled_images tag) is stopped, nothing is marked failed,
    // and the release that follows is not held up.
    const hangPort = await freeLoopbackPort();
    const hang = `127.0.0.1:${hangPort}/lab/hang:1`;
    const blackHole = execa(
      "nsenter",
      [
        `--net=${labRegistryNetns(host)}`,
        "--",
        process.execPath,
        "-e",
        `require("net").createServer(() => {}).listen(${hangPort}, "127.0.0.1", () => console.log("listening"))`,
      ],
      { reject: false },
    );
    t.teardown(() => void blackHole.kill("SIGKILL"));
    await new Promise<void>((resolve) => blackHole.stdout!.once("data", () => resolve()));
    host.instance.tags["io.simcore.autoscaling.pre_pulled_images"] = JSON.stringify([hang, fresh]);
    const background = execa(process.execPath, [MAIN, "refresh", "--background", "--config", config], {
      cwd: REPO,
      env: childEnv(),
      extendEnv: false,
      reject: false,
    });
    const stateFile = join(host.paths.hostRoot, "var/lib/ebs-cache-agent/refresh.json");
    const pulling = await pollUntil(async () => {
      const text = await readFile(stateFile, "utf8").catch(() => "{}");
      return (
        (JSON.parse(text) as { images?: Array<{ image: string; phase: string }> }).images?.some(
          (i) => i.image === hang && i.phase === "pulling",
        ) ?? false
      );
    });
    t.ok(pulling, "the hanging pull started", { stderr: background.stderr });
    background.kill("SIGTERM");
    const ended = await background;
    t.equal(ended.signal, undefined, "the refresh exits by itself on SIGTERM", { stderr: ended.stderr });
    t.equal(ended.exitCode, 1, "stopped, not done (exit 1)", { stderr: ended.stderr });
    t.match(ended.stderr, /refresh\.stopped/);
    const stopped = JSON.parse(await readFile(stateFile, "utf8")) as {
      phase: string;
      images: Array<{ image: string; phase: string; sources: string[] }>;
    };
    t.equal(stopped.phase, "stopped");
    t.match(
      stopped.images.find((i) => i.image === hang),
      { phase: "pending", sources: ["pre-pulled"] },
      "the stopped pull is pending, not failed",
    );
    t.match(
      stopped.images.find((i) => i.image === fresh),
      { phase: "present", sources: ["generation", "pre-pulled"] },
    );
    const released = await releaseLabHost(bl.lab, host, { overrides, log });
    t.equal(released.report?.outcome, "released", "the release follows", { log: log.lines.slice(-20).join("\n") });
    t.ok(await bl.waitAvailable(volumeId), "the volume is available again");
    t.equal((await bl.tags(volumeId))[VolumeTag.builtAt], builtAt, "as the current generation");
  },
);
