/**
 * `npm run lab -- --engine 28 --store containerd`: the lab demo (demo.ts) on another docker
 * engine. The host is an engine machine (nspawn-host.ts: Debian with that docker, booted under
 * its own systemd, the agent installed as on an AMI); the golden snapshot is built by the same
 * engine with the chosen image store (nspawn-golden.ts). It prints the same timeline: the pool,
 * the claim, the mount, docker on the volume, the images there without a pull, the labels, and
 * the release at poweroff (ebs-cache-agent-release.service's ExecStop).
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { DescribeVolumesCommand } from "@aws-sdk/client-ec2";
import { containerdRootOf } from "../../docker/containerd-store.ts";
import { createDockerEngine, type ImageStore } from "../../docker/engine.ts";
import { AgentError, describeError } from "../../errors.ts";
import { VolumeTag } from "../../tags.ts";
import { describePool, type DemoOptions } from "./demo.ts";
import { createPoolVolumes } from "../volumes/golden.ts";
import { startLab } from "../lab.ts";
import { machineDockerHost } from "../machines/nspawn-docker.ts";
import { buildEngineGoldenSnapshot } from "../machines/nspawn-golden.ts";
import { machineStatus, startEngineHost, waitForReadyUnit } from "../machines/nspawn-host.ts";
import { buildBundle, type Machine } from "../machines/nspawn.ts";
import {
  CACHE_BASE,
  ENGINES,
  cachedRootfs,
  debianMirror,
  nspawnProblems,
  rootfsCacheDir,
  type EngineName,
} from "../machines/nspawn-rootfs.ts";

/** The engine demo's options: the demo's, and the engine and store. */
export interface EngineDemoOptions extends DemoOptions {
  engine: EngineName;
  store: ImageStore;
}

/** Bounds a hung machine, not a slow one: the boot under load took up to 2 minutes in the nspawn test. */
const BOOT_TIMEOUT_MS = 6 * 60_000;

/** Runs the engine demo; resolves after the machine and the lab are gone. */
export async function runEngineDemo(options: EngineDemoOptions): Promise<void> {
  const { log, out } = options;
  const engine = ENGINES[options.engine];
  const problems = await nspawnProblems();
  if (problems.length > 0) {
    throw new AgentError(
      `the demo on ${engine.name} cannot run here: ${problems.join("; ")}`,
      "run it as root on a machine set up by scripts/setup.sh",
    );
  }
  const started = Date.now();
  const timeline: Array<[string, number]> = [];
  const step = async <T>(name: string, work: () => Promise<T>): Promise<T> => {
    const t0 = Date.now();
    try {
      return await work();
    } finally {
      timeline.push([name, Date.now() - t0]);
    }
  };

  const rootfs = await step("root file system", () => engineRootfs(options.engine, out));
  out(
    `${engine.name}: root file system ${rootfs.dir} ` +
      `(${rootfs.built ? `built now in ${(rootfs.ms / 1000).toFixed(0)} s` : "cached"})`,
  );
  const work = await mkdtemp(join(CACHE_BASE, "demo-"));
  let machine: Machine | undefined;
  try {
    const bundle = await step("agent bundle", () => buildBundle(work));
    const lab = await step("lab up", () => startLab({ name: "demo-engine", log }));
    try {
      out(`lab root: ${lab.root}`);
      out(`EC2 emulator: ${lab.ec2.endpoint} (region ${lab.region})`);
      const imageSet = "lab-demo-1";
      const golden = await step("golden snapshot", () =>
        buildEngineGoldenSnapshot(lab, {
          pool: options.pool,
          imageSet,
          images: [{ tag: "lab/app:1", payloadBytes: options.imageMiB * 1024 * 1024 }],
          rootfs: rootfs.dir,
          bundle,
          store: options.store,
          log,
        }),
      );
      out(
        `golden snapshot: ${golden.snapshotId} (${golden.sizeGiB} GiB) holding ${golden.images.join(", ")}, ` +
          `built by docker ${golden.built.engineVersion} on the ${golden.built.store} image store`,
      );
      const volumes = await step("pool volumes", () =>
        createPoolVolumes(lab, golden, { pool: options.pool, imageSet, count: options.poolSize }),
      );
      out(`pool ${options.pool}: ${volumes.join(" ")}`);
      out("");
      out(
        `$ aws ec2 describe-volumes --filters Name=tag:${VolumeTag.pool},Values=${options.pool} --endpoint-url ` +
          `${lab.ec2.endpoint}`,
      );
      out(await describePool(lab, options.pool));

      // A fresh instance boots: its systemd runs the agent's phase 1, docker, phase 2.
      const { host } = await step("machine boot", async () => {
        const booted = await startEngineHost(
          lab,
          {
            rootfs: rootfs.dir,
            bundle,
            store: options.store,
            name: "demo-node",
            overrides: { pool: options.pool, imageSet },
          },
          (m) => (machine = m),
        );
        await waitForReadyUnit(booted.machine, BOOT_TIMEOUT_MS);
        return booted;
      });
      const m = machine!;
      out("");
      out(
        `instance ${host.instance.instanceId} boots (zone ${host.instance.availabilityZone}) as machine ` +
          `${m.name}: ${engine.name}, ${options.store} image store, the agent's units under systemd`,
      );
      const status = await machineStatus(m);
      out(
        `outcome: ${status.boot?.outcome ?? "none"} (source ` +
          `${status.boot?.source ?? "none"})${status.boot?.reason ? ` (${status.boot.reason})` : ""}`,
      );
      if (status.volume)
        out(`volume ${status.volume.volumeId} on ${status.volume.device ?? "?"} at ${status.mount?.mountPoint ?? "?"}`);
      out("boot timeline (both phases, from `ebs-cache-agent status --json` in the machine):");
      for (const { step: name, seconds } of status.boot?.timeline ?? [])
        out(`  ${name.padEnd(20)} ${seconds.toFixed(2)} s`);
      const info = await createDockerEngine({ host: machineDockerHost(m) }).info();
      out(`docker ${info.serverVersion}, image store ${info.imageStore} (driver ${info.driver})`);
      out(`docker data-root: ${info.dockerRootDir}`);
      if (options.store === "containerd") {
        const path = join(m.dir, "etc/containerd/config.toml");
        out(`containerd root: ${containerdRootOf(await readFile(path, "utf8"), path)}`);
      }
      out("labels:");
      for (const label of info.labels) out(`  ${label}`);
      out("$ docker image ls");
      out((await m.exec(["docker", "image", "ls"])).stdout);
      const ran = await m.exec(
        [
          "docker",
          "run",
          "--rm",
          "--pull=never",
          "--network",
          "none",
          golden.images[0]!,
          "echo",
          "hello from the cache volume",
        ],
        120_000,
      );
      out(
        `$ docker run --rm --pull=never ${golden.images[0]} echo …  ->  ` +
          `${ran.exitCode === 0 ? ran.stdout.trim() : `exit ${ran.exitCode}: ${ran.stderr.trim()}`}`,
      );
      out("");
      out("$ aws ec2 describe-volumes (after the boot)");
      out(await describePool(lab, options.pool));

      // Poweroff: systemd stops docker, then ebs-cache-agent-release.service's ExecStop releases.
      const code = await step("release (poweroff)", () => m.poweroff(180_000));
      out(`machine ${m.name} powered off (nspawn exit ${code ?? "none"})`);
      if (status.volume) {
        const volume = (await lab.ec2Client().send(new DescribeVolumesCommand({ VolumeIds: [status.volume.volumeId] })))
          .Volumes?.[0];
        const released = volume?.Tags?.find((tag) => tag.Key === VolumeTag.releasedAt)?.Value;
        out(
          `release: ${status.volume.volumeId} ${volume?.State ?? "gone"}, ` +
            `${VolumeTag.releasedAt}=${released ?? "none"}`,
        );
      }
      out("");
      out("$ aws ec2 describe-volumes (after the release)");
      out(await describePool(lab, options.pool));
    } finally {
      if (machine) await step("machine down", () => machine!.destroy());
      await step("lab down", () => lab.close());
    }
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  out("");
  out("timeline:");
  for (const [name, ms] of timeline) out(`  ${name.padEnd(18)} ${(ms / 1000).toFixed(2)} s`);
  out(`  ${"total".padEnd(18)} ${((Date.now() - started) / 1000).toFixed(2)} s`);
}

/** The engine's root file system; a first build that cannot reach Debian's archive says so. */
async function engineRootfs(
  name: EngineName,
  out: (line: string) => void,
): Promise<Awaited<ReturnType<typeof cachedRootfs>>> {
  const engine = ENGINES[name];
  try {
    return await cachedRootfs(engine, out);
  } catch (error) {
    const mirror = await debianMirror(engine.suite);
    throw new AgentError(
      `the root file system of ${engine.name} is not cached (${rootfsCacheDir(engine)}) and could not be built: ` +
        `${describeError(error).split("\n")[0]}`,
      `its first build needs Debian's archive (${mirror}, suite ${engine.suite}): run once where it is reachable ` +
        `(about 3 to 7 minutes), later runs use the cache`,
      undefined,
      { cause: error },
    );
  }
}
