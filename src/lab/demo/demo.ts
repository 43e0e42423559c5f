/**
 * `ebs-cache-agent lab`: brings the lab up, builds a golden snapshot and a pool from it, shows
 * the pool as `aws ec2 describe-volumes` does (the real CLI against the emulator), boots a fresh
 * instance with the real agent (timeline, labels, `docker image ls`, a container run from the
 * cache volume), then tears everything down. The first look a newcomer gets at the moving parts.
 */
import { existsSync } from "node:fs";
import { DescribeVolumesCommand } from "@aws-sdk/client-ec2";
import { run } from "../../exec.ts";
import type { Logger } from "../../log.ts";
import { VolumeTag } from "../../tags.ts";
import { buildGoldenSnapshot, createPoolVolumes } from "../volumes/golden.ts";
import { bootLabHost } from "../machines/agent.ts";
import { startLab, type Lab } from "../lab.ts";

const AWS_CLI = "/usr/bin/aws";

/** What the demo builds. */
export interface DemoOptions {
  pool: string;
  poolSize: number;
  /** Payload of the demo image in MiB (0: busybox only). */
  imageMiB: number;
  log: Logger;
  out: (line: string) => void;
}

/** Runs the lab demo; resolves after the lab is torn down. */
export async function runLabDemo(options: DemoOptions): Promise<void> {
  const { log, out } = options;
  const started = Date.now();
  const timeline: Array<[string, number]> = [];
  const step = async <T>(name: string, work: () => Promise<T>): Promise<T> => {
    const t0 = Date.now();
    const result = await work();
    timeline.push([name, Date.now() - t0]);
    return result;
  };

  const lab = await step("lab up", () => startLab({ name: "demo", log }));
  try {
    out(`lab root: ${lab.root}`);
    out(`EC2 emulator: ${lab.ec2.endpoint} (region ${lab.region})`);
    const imageSet = "lab-demo-1";
    const golden = await step("golden snapshot", () =>
      buildGoldenSnapshot(lab, {
        pool: options.pool,
        imageSet,
        images: [{ tag: "lab/app:1", payloadBytes: options.imageMiB * 1024 * 1024 }],
        log,
      }),
    );
    out(`golden snapshot: ${golden.snapshotId} (${golden.sizeGiB} GiB) holding ${golden.images.join(", ")}`);
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

    // A fresh instance boots: the agent's main job.
    const host = await lab.addHost({ tags: { Name: "demo-node" } });
    out("");
    out(`instance ${host.instance.instanceId} boots (zone ${host.instance.availabilityZone})`);
    const booted = await step("agent boot", () => bootLabHost(lab, host, { overrides: { pool: options.pool }, log }));
    const result = booted.report!;
    out(`outcome: ${result.outcome}${result.reason ? ` (${result.reason})` : ""}`);
    if (result.volumeId) out(`volume ${result.volumeId} on ${result.device} at ${result.mountPoint}`);
    out("boot timeline:");
    for (const { step: name, ms } of result.timeline) out(`  ${name.padEnd(20)} ${(ms / 1000).toFixed(2)} s`);
    const dockerd = host.dockerd;
    if (dockerd) {
      const info = await dockerd.info();
      out(`docker data-root: ${info.DockerRootDir}`);
      out("labels:");
      for (const label of info.Labels) out(`  ${label}`);
      out("$ docker image ls");
      out((await dockerd.docker(["image", "ls"])).stdout);
      const ran = await dockerd.docker([
        "run",
        "--rm",
        "--network",
        "none",
        golden.images[0]!,
        "echo",
        "hello from the cache volume",
      ]);
      out(`$ docker run --rm ${golden.images[0]} echo …  ->  ${ran.stdout}`);
    }
    out("");
    out(`$ aws ec2 describe-volumes (after the boot)`);
    out(await describePool(lab, options.pool));
  } finally {
    await step("lab down", () => lab.close());
  }
  out("");
  out("timeline:");
  for (const [name, ms] of timeline) out(`  ${name.padEnd(18)} ${(ms / 1000).toFixed(2)} s`);
  out(`  ${"total".padEnd(18)} ${((Date.now() - started) / 1000).toFixed(2)} s`);
}

/** The pool as the real aws CLI shows it; the SDK's view when the CLI is not installed. */
export async function describePool(lab: Lab, pool: string): Promise<string> {
  const filter = `Name=tag:${VolumeTag.pool},Values=${pool}`;
  if (existsSync(AWS_CLI)) {
    const result = await run(
      AWS_CLI,
      [
        "ec2",
        "describe-volumes",
        "--endpoint-url",
        lab.ec2.endpoint,
        "--filters",
        filter,
        "--output",
        "table",
        "--query",
        `Volumes[].{Id:VolumeId,AZ:AvailabilityZone,State:State,Size:Size,Snapshot:SnapshotId,ClaimedBy:Tags[?Key=='` +
          `${VolumeTag.claimedBy}']|[0].Value}`,
      ],
      { env: { ...process.env, ...lab.awsEnv() } as Record<string, string> },
    );
    return result.stdout;
  }
  const found = await lab
    .ec2Client()
    .send(new DescribeVolumesCommand({ Filters: [{ Name: `tag:${VolumeTag.pool}`, Values: [pool] }] }));
  return JSON.stringify(found.Volumes, null, 2);
}
