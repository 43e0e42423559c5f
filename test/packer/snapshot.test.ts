/**
 * The Packer pool-volume flow's snapshot step (packer/scripts/snapshot-pool-volume.sh) run for
 * real: the Debian aws CLI against the EC2 emulator, on a volume tagged as the template tags
 * it. The snapshot carries the volume's tags, its generation (`ebs-cache:built-at`) included;
 * a volume without `built-at` (an older template) is refused and no snapshot is made.
 */
import { access, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { CreateVolumeCommand, DescribeSnapshotsCommand } from "@aws-sdk/client-ec2";
import { currentSnapshot } from "../../src/agent/volume-rules.ts";
import type { SnapshotInfo } from "../../src/agent/ports.ts";
import { run } from "../../src/exec.ts";
import { VolumeKind, VolumeTag } from "../../src/tags.ts";
import { AWS_CLI, AWS_CLI_EMULATOR_ENV, startLab, volumeState } from "../lab/ec2/helpers.ts";

await access(AWS_CLI).catch(() => {
  throw new Error(`${AWS_CLI} is missing: install the Debian package awscli (scripts/setup.sh does)`);
});

const SCRIPT = "packer/scripts/snapshot-pool-volume.sh";

t.test("the snapshot step copies the volume's generation; a volume without one is refused", async (t) => {
  const lab = await startLab(t);
  const ec2 = lab.client();
  const dir = await mkdtemp(join(tmpdir(), "packer-snapshot-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));

  /** A pool volume as packer/pool-volume.pkr.hcl tags it, available. */
  async function poolVolume(builtAt: string | undefined): Promise<string> {
    const tags: Record<string, string> = {
      [VolumeTag.managed]: "true",
      [VolumeTag.kind]: VolumeKind.pool,
      [VolumeTag.pool]: "sim4life",
      [VolumeTag.imageSet]: "2026-12",
      [VolumeTag.images]: "busybox:1.36",
      [VolumeTag.imageStore]: "graphdriver",
      ...(builtAt ? { [VolumeTag.builtAt]: builtAt } : {}),
    };
    const created = await ec2.send(
      new CreateVolumeCommand({
        AvailabilityZone: "us-east-1a",
        Size: 4,
        TagSpecifications: [
          { ResourceType: "volume", Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })) },
        ],
      }),
    );
    await volumeState(ec2, created.VolumeId!, "available");
    return created.VolumeId!;
  }

  /** Runs the step as Packer's shell-local post-processor does, with the manifest and the builder's file. */
  async function snapshotStep(volumeId: string) {
    const manifest = join(dir, `manifest-${volumeId}.json`);
    const built = join(dir, `built-${volumeId}.env`);
    await writeFile(
      manifest,
      JSON.stringify({ builds: [{ name: "pool", artifact_id: `us-east-1:${volumeId}` }] }, null, 2),
    );
    await writeFile(built, "ENGINE_VERSION=28.5.2\n");
    return run("bash", [SCRIPT], {
      check: false,
      timeoutMs: 300_000,
      env: {
        // The Debian CLI first (the one scripts/setup.sh installs), whatever else PATH holds.
        PATH: "/usr/bin:/bin",
        MANIFEST: manifest,
        BUILT: built,
        EC2_ENDPOINT_URL: lab.emu.endpoint,
        ...AWS_CLI_EMULATOR_ENV,
      },
    });
  }

  const snapshots = async (): Promise<SnapshotInfo[]> =>
    ((await ec2.send(new DescribeSnapshotsCommand({ OwnerIds: ["self"] }))).Snapshots ?? []).map((s) => ({
      snapshotId: s.SnapshotId!,
      state: s.State as SnapshotInfo["state"],
      volumeSizeGiB: s.VolumeSize ?? 0,
      ...(s.StartTime ? { startTime: s.StartTime } : {}),
      tags: Object.fromEntries((s.Tags ?? []).map((x) => [x.Key!, x.Value!])),
    }));

  const newer = await poolVolume("2026-12-01T10:00:00Z");
  const ok = await snapshotStep(newer);
  t.equal(ok.exitCode, 0, "the step succeeds", { stdout: ok.stdout, stderr: ok.stderr });
  const [made] = await snapshots();
  t.equal(made?.state, "completed", "it waited for the snapshot");
  t.equal(made?.tags[VolumeTag.builtAt], "2026-12-01T10:00:00Z", "the snapshot carries the build's time");
  t.equal(
    made?.tags[VolumeTag.engineVersion],
    "28.5.2",
    "and the builder's engine version, tagged on the volume first",
  );
  t.equal(made?.tags[VolumeTag.imageSet], "2026-12");

  // An older build snapshotted afterwards: the later snapshot, the older generation.
  const older = await snapshotStep(await poolVolume("2026-11-01T10:00:00Z"));
  t.equal(older.exitCode, 0, "a second build's step succeeds", { stderr: older.stderr });
  t.equal(
    currentSnapshot(await snapshots())?.snapshotId,
    made?.snapshotId,
    "the current generation is the newer build, not the newer snapshot",
  );

  const untagged = await poolVolume(undefined);
  const refused = await snapshotStep(untagged);
  t.not(refused.exitCode, 0, "a volume without built-at is refused");
  t.match(refused.stderr, new RegExp(`${untagged} has no ebs-cache:built-at tag`));
  t.equal((await snapshots()).length, 2, "and no snapshot is made of it");
});
