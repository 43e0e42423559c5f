/**
 * Shared by the EC2 emulator tests: an emulator with a recording backend and fast delays, the
 * SDK client and the aws CLI pointed at it, and polling with generous deadlines (no test may
 * depend on how fast the machine is).
 */
import {
  CreateVolumeCommand,
  DescribeSnapshotsCommand,
  DescribeVolumesCommand,
  EC2Client,
  type Volume,
} from "@aws-sdk/client-ec2";
import { randomBytes } from "node:crypto";
import { access } from "node:fs/promises";
import type { RunResult } from "../../../src/exec.ts";
import { MemoryVolumeBackend, type MemoryVolumeBackendOptions } from "../../../src/lab/ec2/memory-backend.ts";
import { startEc2Emulator, type Ec2Emulator, type Ec2EmulatorOptions } from "../../../src/lab/ec2/index.ts";
import type { LabInstance } from "../../../src/lab/types.ts";
import { awsCli } from "../../fixtures/lab/aws-cli-batch.ts";

/** Delays short enough for a fast suite, long enough to observe each state by polling. */
export const FAST = { createMs: 30, attachMs: 60, detachMs: 60, snapshotMs: 60 };

export interface Lab {
  emu: Ec2Emulator;
  backend: MemoryVolumeBackend;
  /** Two instances: `a` in us-east-1a, `b` in us-east-1b. */
  a: LabInstance;
  b: LabInstance;
  /** An SDK client (default retries unless `maxAttempts` is given). */
  client(maxAttempts?: number): EC2Client;
}

/** A fresh instance id. */
export function instanceId(): string {
  return `i-${randomBytes(9).toString("hex").slice(0, 17)}`;
}

export function labInstance(zone = "us-east-1a", tags: Record<string, string> = {}): LabInstance {
  return {
    instanceId: instanceId(),
    region: "us-east-1",
    availabilityZone: zone,
    tags: { Name: "swarm-node", ...tags },
    metadataTags: true,
    hostRoot: "/nonexistent",
  };
}

/** Starts an emulator for the test (closed when the test ends) with instances a and b. */
export async function startLab(
  t: { teardown(fn: () => unknown): void },
  options: Partial<Ec2EmulatorOptions> & { backendOptions?: MemoryVolumeBackendOptions } = {},
): Promise<Lab> {
  const backend = new MemoryVolumeBackend(options.backendOptions);
  const emu = await startEc2Emulator({ backend, delays: FAST, ...options });
  t.teardown(() => emu.close());
  const a = emu.registerInstance(labInstance("us-east-1a"));
  const b = emu.registerInstance(labInstance("us-east-1b"));
  const clients: EC2Client[] = [];
  t.teardown(() => clients.forEach((c) => c.destroy()));
  return {
    emu,
    backend,
    a,
    b,
    client(maxAttempts?: number) {
      const c = new EC2Client({
        endpoint: emu.endpoint,
        region: "us-east-1",
        credentials: { accessKeyId: "dummy", secretAccessKey: "dummy" },
        ...(maxAttempts !== undefined ? { maxAttempts } : {}),
        // Signed in the emulator's time from the first request, as a client that has learned it: a
        // test that drives the emulator's clock far from the host's is not refused (RequestExpired).
        systemClockOffset: emu.now() - Date.now(),
      });
      clients.push(c);
      return c;
    },
  };
}

/** A promise the test settles when it wants: holds a backend call (see MemoryVolumeBackend `hold`). */
export function gate(): { promise: Promise<void>; open(): void } {
  let open = () => {};
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/** Calls `probe` until `done` holds for its result; fails after `timeoutMs` (generous on purpose). */
export async function poll<T>(
  probe: () => Promise<T> | T,
  done: (value: T) => boolean,
  { timeoutMs = 20_000, intervalMs = 10 }: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (done(value)) return value;
    if (Date.now() > deadline) {
      throw new Error(`poll: condition not met within ${timeoutMs} ms; last: ${JSON.stringify(value)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** What an SDK call failed with. */
export interface SdkFailure {
  name: string;
  code: string | undefined;
  status: number | undefined;
  attempts: number | undefined;
  message: string;
}

/** The error an SDK call failed with (`name`, HTTP status); throws if it succeeded. */
export async function sdkError(call: Promise<unknown>): Promise<SdkFailure> {
  try {
    await call;
  } catch (error) {
    const e = error as {
      name: string;
      Code?: string;
      message: string;
      $metadata?: { httpStatusCode?: number; attempts?: number };
    };
    const meta = e.$metadata ?? {};
    return { name: e.name, code: e.Code, status: meta.httpStatusCode, attempts: meta.attempts, message: e.message };
  }
  throw new Error("expected the call to fail, it succeeded");
}

/** One volume as DescribeVolumes shows it. */
export async function describeVolume(client: EC2Client, volumeId: string): Promise<Volume> {
  const out = await client.send(new DescribeVolumesCommand({ VolumeIds: [volumeId] }));
  const found = out.Volumes?.[0];
  if (!found) throw new Error(`no ${volumeId}`);
  return found;
}

/** Creates a volume (8 GiB in us-east-1a unless told) and waits until it is available. */
export async function availableVolume(
  client: EC2Client,
  input: {
    zone?: string;
    size?: number;
    tags?: Record<string, string>;
    snapshotId?: string;
    type?: "gp3" | "gp2" | "io2";
  } = {},
): Promise<string> {
  const created = await client.send(
    new CreateVolumeCommand({
      AvailabilityZone: input.zone ?? "us-east-1a",
      Size: input.size ?? (input.snapshotId ? undefined : 8),
      SnapshotId: input.snapshotId,
      VolumeType: input.type,
      ...(input.type === "io2" ? { Iops: 3000 } : {}),
      TagSpecifications: input.tags
        ? [{ ResourceType: "volume", Tags: Object.entries(input.tags).map(([Key, Value]) => ({ Key, Value })) }]
        : undefined,
    }),
  );
  const id = created.VolumeId as string;
  await volumeState(client, id, "available");
  return id;
}

/** Polls until the volume's state is `state`. */
export function volumeState(client: EC2Client, volumeId: string, state: string): Promise<Volume> {
  return poll(
    () => describeVolume(client, volumeId),
    (v) => v.State === state,
  );
}

/** Polls until the volume's attachment is in `state` (attaching, attached, detaching). */
export function attachmentState(client: EC2Client, volumeId: string, state: string): Promise<Volume> {
  return poll(
    () => describeVolume(client, volumeId),
    (v) => v.Attachments?.[0]?.State === state,
  );
}

/** Polls until the snapshot is completed. */
export async function snapshotCompleted(client: EC2Client, snapshotId: string): Promise<void> {
  await poll(
    () => client.send(new DescribeSnapshotsCommand({ SnapshotIds: [snapshotId] })),
    (out) => out.Snapshots?.[0]?.State === "completed",
  );
}

/** The Debian aws CLI (the `aws` on PATH may be a broken pyenv shim). */
export const AWS_CLI = "/usr/bin/aws";

/**
 * The aws CLI's environment against the emulator: dummy keys, no IMDS, no pager, no config or credentials files of the
 * machine.
 */
export const AWS_CLI_EMULATOR_ENV: Readonly<Record<string, string>> = {
  AWS_ACCESS_KEY_ID: "dummy",
  AWS_SECRET_ACCESS_KEY: "dummy",
  AWS_EC2_METADATA_DISABLED: "true",
  AWS_PAGER: "",
  AWS_CONFIG_FILE: "/dev/null",
  AWS_SHARED_CREDENTIALS_FILE: "/dev/null",
};

let installed: Promise<void> | undefined;
/** Fails (never skips) when the Debian awscli is missing. */
function assertAwsCli(): Promise<void> {
  installed ??= access(AWS_CLI).catch(() => {
    throw new Error(`${AWS_CLI} is missing: install the Debian package awscli (scripts/setup.sh does)`);
  });
  return installed;
}

/**
 * Runs `aws ec2 <args>` against the emulator (the Debian CLI, aws-cli-batch.ts); env isolates it
 * from any real AWS configuration.
 */
export async function awsEc2(
  endpoint: string,
  args: readonly string[],
  env: Record<string, string> = {},
): Promise<RunResult> {
  await assertAwsCli();
  return awsCli(["ec2", ...args, "--endpoint-url", endpoint, "--region", "us-east-1", "--output", "json"], {
    ...AWS_CLI_EMULATOR_ENV,
    // Client errors are not retried anyway; this keeps 5xx cases from backing off for seconds.
    AWS_MAX_ATTEMPTS: "1",
    ...env,
  });
}

/** Runs an `aws ec2` call and parses its JSON output; throws with stderr when it failed. */
export async function awsJson<T = Record<string, unknown>>(
  endpoint: string,
  args: readonly string[],
  env: Record<string, string> = {},
): Promise<T> {
  const result = await awsEc2(endpoint, args, env);
  if (result.exitCode !== 0) throw new Error(`aws ec2 ${args.join(" ")} exited ${result.exitCode}: ${result.stderr}`);
  return (result.stdout.trim() === "" ? {} : JSON.parse(result.stdout)) as T;
}

/** Runs async jobs with at most `limit` at a time. */
export async function limited<T>(limit: number, jobs: readonly (() => Promise<T>)[]): Promise<T[]> {
  const results: T[] = new Array<T>(jobs.length);
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const i = next++;
      results[i] = await (jobs[i] as () => Promise<T>)();
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, jobs.length) }, worker));
  return results;
}
