/**
 * What a rerun of `snapshot upload` finds of the snapshot its manifest names, against the lab's
 * EBS direct emulator: completed by the run that was killed before its manifest said so (read
 * back and recorded; nothing put, never stuck), in `error` because its Timeout passed (abandoned
 * for a fresh upload), completed but not holding the image (refused before the manifest says
 * completed, then abandoned by the rerun); and the read-back check itself, which finds a block
 * EBS put elsewhere than asked. Throughout, what every reader of the pool would choose as its
 * current snapshot (the keeper's observe, and currentSnapshot over the pool's listing as the boot,
 * gc and the refresh read it, through the EC2 SDK and adapter): never a snapshot before its
 * read-back passed (it carries `ebs-cache:unverified` until then), an older one without the tag
 * meanwhile.
 */
import {
  CreateSnapshotCommand,
  CreateVolumeCommand,
  DescribeSnapshotsCommand,
  waitUntilSnapshotCompleted,
  waitUntilVolumeAvailable,
} from "@aws-sdk/client-ec2";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t, { type Test } from "tap";
import { parseManifest } from "../../../src/agent/snapshot/manifest.ts";
import { EBS_BLOCK_BYTES, linearAggregate } from "../../../src/agent/snapshot/plan.ts";
import { runSnapshotUpload } from "../../../src/agent/snapshot/run.ts";
import { SnapshotVerifyError } from "../../../src/agent/snapshot/verify.ts";
import { observeKeeper } from "../../../src/agent/keeper/observe.ts";
import { currentSnapshot } from "../../../src/agent/volume-rules.ts";
import { snapshotBlockWriter } from "../../../src/aws/ebs.ts";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { Ec2CallError, classifyEc2Error } from "../../../src/aws/errors.ts";
import { uploadedSnapshots } from "../../../src/aws/uploaded-snapshots.ts";
import { SnapshotTag } from "../../../src/tags.ts";
import { scanImage, sha256 } from "../../../src/host/image-blocks.ts";
import { readManifestJson } from "../../../src/host/snapshot-manifest.ts";
import { makePoolImage, randomBlock } from "../../fixtures/builders/pool-image.ts";
import {
  generationTagsFor,
  poolSnapshots,
  testEbsClient,
  testEc2Client,
  uploadDeps,
  uploadSettings,
} from "../../fixtures/lab/snapshot-upload.ts";
import { startLab, type Lab } from "../../lab/ec2/helpers.ts";

async function setup(t: Test, lab: Lab) {
  const dir = await mkdtemp(join(tmpdir(), "upload-reconcile-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const image = join(dir, "set.img");
  await makePoolImage(image);
  const client = testEbsClient(t, lab.emu.endpoint, 1);
  const manifest = join(dir, "gen.json");
  /** The manifest, past `starting`: a snapshot named (every test here reads it once StartSnapshot answered). */
  const read = async () => {
    const m = parseManifest(manifest, await readManifestJson(manifest));
    if (m.status === "starting") throw new Error(`${manifest} is still starting: no snapshot named`);
    return m;
  };
  const holdsImage = async (snapshotId: string) => {
    const expected = (await scanImage(image, EBS_BLOCK_BYTES)).blocks;
    const held = lab.backend.snapshotBlocks.get(snapshotId) ?? new Map<number, Buffer>();
    return [...held.keys()].sort((a, b) => a - b).join() === [...expected.keys()].sort((a, b) => a - b).join();
  };
  const listed = poolSnapshots(client);
  const cloud = createCloudVolumes({ client: testEc2Client(client) });
  const keeper = {
    pool: "sim4life",
    imageSet: null,
    volumeType: "gp3",
    zones: ["us-east-1a"],
    minAvailable: 1,
    maxAvailable: 2,
    maxVolumes: 4,
    maxGiB: 100,
    initializationRateMiBps: null,
    quarantineHours: 6,
  };
  /** What the pool's readers take as its current snapshot: the boot's (gc's, the refresh's) and the keeper's. */
  const chosen = async () => ({
    boot: currentSnapshot(await listed())?.snapshotId,
    keeper: (await observeKeeper(cloud, keeper, { withInitialization: false })).snapshot?.snapshotId,
  });
  /** The snapshot's tags as EC2 lists them (undefined: it is gone). */
  const tagsOf = async (snapshotId: string) => (await listed()).find((x) => x.snapshotId === snapshotId)?.tags;
  return { dir, image, client, manifest, read, holdsImage, chosen, tagsOf };
}

/**
 * A snapshot of the pool as a volume snapshot (Packer's flow, or an upload made before the tag
 * existed): the pool's tags, one generation older, no `ebs-cache:unverified`.
 */
async function olderSnapshot(t: Test, lab: Lab): Promise<string> {
  const ec2 = lab.client();
  const volume = await ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 1 }));
  await waitUntilVolumeAvailable({ client: ec2, maxWaitTime: 60, minDelay: 1 }, { VolumeIds: [volume.VolumeId!] });
  const tags = generationTagsFor("2026-11-01T00:00:00Z");
  const made = await ec2.send(
    new CreateSnapshotCommand({
      VolumeId: volume.VolumeId!,
      TagSpecifications: [
        { ResourceType: "snapshot", Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })) },
      ],
    }),
  );
  await waitUntilSnapshotCompleted({ client: ec2, maxWaitTime: 60, minDelay: 1 }, { SnapshotIds: [made.SnapshotId!] });
  t.comment(`the older snapshot: ${made.SnapshotId!}`);
  return made.SnapshotId!;
}

t.test(
  "killed between CompleteSnapshot and the manifest: the rerun finds it completed, checks it, records it",
  async (t) => {
    const lab = await startLab(t);
    const { image, client, manifest, read, holdsImage, chosen, tagsOf } = await setup(t, lab);
    const older = await olderSnapshot(t, lab);
    t.same(await chosen(), { boot: older, keeper: older }, "before the upload: the older snapshot is current");
    const base = snapshotBlockWriter(client);
    const dying = {
      ...base,
      async complete(...args: Parameters<typeof base.complete>) {
        await base.complete(...args);
        throw new Error("killed right after CompleteSnapshot");
      },
    };
    await t.rejects(runSnapshotUpload(uploadDeps(client, { writer: dying }), uploadSettings(image, manifest)), {
      message: /killed right after/,
    });
    const left = await read();
    t.equal(left.status, "uploading", "the manifest does not say completed");
    t.match(
      await tagsOf(left.snapshotId),
      { [SnapshotTag.unverified]: "true", "ebs-cache:pool": "sim4life" },
      "completed in EBS with the pool's tags, and tagged unverified",
    );
    t.same(
      await chosen(),
      { boot: older, keeper: older },
      "killed between completion and read-back: the newer snapshot is nobody's current one, the older still is",
    );
    const lines: string[] = [];
    const rerun = await runSnapshotUpload(uploadDeps(client, { lines }), uploadSettings(image, manifest));
    t.match(
      rerun,
      { snapshotId: left.snapshotId, status: "completed", reconciled: true, put: 0, abandoned: [] },
      "the same snapshot, found completed: nothing put, no CompleteSnapshot again",
    );
    t.ok(rerun.verified.read > 0, "… read back before it is recorded");
    t.match(await read(), { status: "completed", snapshotId: left.snapshotId }, "the manifest now says completed");
    t.ok(
      lines.some((line) => line.includes("snapshot.reconcile")),
      "the rerun says what it found",
    );
    t.ok(await holdsImage(rerun.snapshotId), "the snapshot holds the image");
    t.notOk(
      Object.hasOwn((await tagsOf(rerun.snapshotId)) ?? {}, SnapshotTag.unverified),
      "read back by the rerun: the tag is gone",
    );
    t.same(await chosen(), { boot: rerun.snapshotId, keeper: rerun.snapshotId }, "… and now it is the current one");
    await t.rejects(runSnapshotUpload(uploadDeps(client), uploadSettings(image, manifest)), {
      message: /already completed/,
    });
  },
);

t.test("the tag's removal refused once: the snapshot stays unverified, the rerun checks and removes it", async (t) => {
  const lab = await startLab(t);
  const { image, client, manifest, read, chosen, tagsOf } = await setup(t, lab);
  const base = uploadedSnapshots(testEc2Client(client));
  const denied = new Ec2CallError(
    "DeleteTags",
    classifyEc2Error(Object.assign(new Error("not authorized"), { name: "UnauthorizedOperation" })),
    undefined,
  );
  const refusing = { ...base, markVerified: () => Promise.reject(denied) };
  await t.rejects(
    runSnapshotUpload(uploadDeps(client, { snapshots: refusing }), uploadSettings(image, manifest)),
    denied,
    "the upload fails with EC2's refusal",
  );
  const left = await read();
  t.equal(left.status, "completing", "read back, but the manifest does not say completed");
  t.match(await tagsOf(left.snapshotId), { [SnapshotTag.unverified]: "true" }, "the tag stays");
  t.same(await chosen(), { boot: undefined, keeper: undefined }, "so nobody takes it");
  const rerun = await runSnapshotUpload(uploadDeps(client), uploadSettings(image, manifest));
  t.match(rerun, { snapshotId: left.snapshotId, reconciled: true, put: 0 }, "the rerun checks the same snapshot");
  t.same(await chosen(), { boot: left.snapshotId, keeper: left.snapshotId }, "… removes the tag: now current");
});

t.test("a snapshot in error (its Timeout passed): abandoned, uploaded anew", async (t) => {
  let now = Date.parse("2026-12-02T10:00:00Z");
  const lab = await startLab(t, { clock: () => now });
  const { image, client, manifest, read, holdsImage } = await setup(t, lab);
  const controller = new AbortController();
  const base = snapshotBlockWriter(client);
  let puts = 0;
  const stopping = {
    ...base,
    async putBlock(...args: Parameters<typeof base.putBlock>) {
      await base.putBlock(...args);
      if (++puts === 2) controller.abort(new Error("stopped"));
    },
  };
  await t.rejects(
    runSnapshotUpload(uploadDeps(client, { writer: stopping, signal: controller.signal }), {
      ...uploadSettings(image, manifest),
      concurrency: 1,
      timeoutMinutes: 10,
    }),
    { name: "SnapshotUploadError" },
  );
  const left = await read();
  now += 11 * 60_000;
  const lines: string[] = [];
  const rerun = await runSnapshotUpload(uploadDeps(client, { lines }), {
    ...uploadSettings(image, manifest),
    timeoutMinutes: 10,
  });
  t.not(rerun.snapshotId, left.snapshotId, "a new snapshot");
  t.same(rerun.abandoned, [left.snapshotId], "the failed one abandoned, and the report names it");
  t.equal(rerun.resumed, 0, "nothing of the failed one counted as put");
  t.ok(
    lines.some((line) => line.includes("snapshot.abandoned") && line.includes("in error")),
    "the rerun says why",
  );
  t.ok(await holdsImage(rerun.snapshotId), "the new snapshot holds the image");
  t.ok(
    lines.some((line) => line.includes("snapshot.discarded") && line.includes(left.snapshotId)),
    "EBS failed the abandoned one (the emulator, as EBS does): deleted",
  );
  await t.rejects(
    lab.client().send(new DescribeSnapshotsCommand({ SnapshotIds: [left.snapshotId] })),
    { name: "InvalidSnapshot.NotFound" },
    "… gone from EC2",
  );
  t.match(await read(), { status: "completed", snapshotId: rerun.snapshotId });
});

t.test(
  "completed without the image: refused, deleted, never anyone's current snapshot; the rerun uploads anew",
  async (t) => {
    const lab = await startLab(t);
    const { image, client, manifest, read, holdsImage, chosen, tagsOf } = await setup(t, lab);
    const older = await olderSnapshot(t, lab);
    const blocks = [...(await scanImage(image, EBS_BLOCK_BYTES)).blocks.keys()].sort((a, b) => a - b);
    const last = blocks.at(-1)!;
    t.ok(last + 1 < 2048, "a free block after the image's last one");
    // An EBS that puts the last block one further than asked: the count and the aggregate
    // checksum (digests in index order) still agree, so CompleteSnapshot takes it.
    const base = snapshotBlockWriter(client);
    const shifting = {
      ...base,
      putBlock: (snapshotId: string, index: number, data: Uint8Array, sha: string) =>
        base.putBlock(snapshotId, index === last ? last + 1 : index, data, sha),
    };
    const error = await runSnapshotUpload(
      uploadDeps(client, { writer: shifting }),
      uploadSettings(image, manifest),
    ).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(error instanceof SnapshotVerifyError, "the read-back check refuses it");
    t.match(error, {
      message: new RegExp(
        `does not hold the image: 1 blocks holding data in the image are not in it \\(${last}\\)` +
          "(; .*)?; it was deleted$",
      ),
      remediation: /uploads anew/,
      disposal: { deleted: true },
      exitCode: 1,
    });
    const left = await read();
    t.equal(left.status, "rejected", "the manifest says rejected: never a parent, never checked again");
    t.equal(await tagsOf(left.snapshotId), undefined, "the snapshot is deleted");
    t.same(await chosen(), { boot: older, keeper: older }, "the older snapshot stays the current one");
    const lines: string[] = [];
    const rerun = await runSnapshotUpload(uploadDeps(client, { lines }), {
      ...uploadSettings(image, manifest),
      verifyAll: true,
    });
    t.same(rerun.abandoned, [left.snapshotId], "the rerun abandons the rejected one");
    t.not(rerun.snapshotId, left.snapshotId);
    t.match(rerun, { status: "completed", reconciled: false, verified: { all: true } });
    t.ok(await holdsImage(rerun.snapshotId), "the new snapshot holds the image");
    t.same(await chosen(), { boot: rerun.snapshotId, keeper: rerun.snapshotId }, "read back: the new one is current");
  },
);

t.test(
  "found wrong and not deletable: it keeps the tag, nobody takes it; the rerun deletes it, never checks it",
  async (t) => {
    const lab = await startLab(t);
    const { image, client, manifest, read, chosen, tagsOf } = await setup(t, lab);
    const older = await olderSnapshot(t, lab);
    const blocks = [...(await scanImage(image, EBS_BLOCK_BYTES)).blocks.keys()].sort((a, b) => a - b);
    const first = blocks[0]!;
    // An EBS that stores other bytes where the image's first block goes (their own checksum sent):
    // the count and the aggregate of what it took agree, so CompleteSnapshot takes it.
    const base = snapshotBlockWriter(client);
    const other = randomBlock();
    const otherSha = sha256(other).toString("base64");
    const sent = new Map<number, string>();
    const swapping = {
      ...base,
      putBlock: async (snapshotId: string, index: number, data: Uint8Array, sha: string) => {
        const [bytes, hash] = index === first ? [other, otherSha] : [data, sha];
        await base.putBlock(snapshotId, index, bytes, hash);
        sent.set(index, hash);
      },
      complete: (snapshotId: string, count: number) => base.complete(snapshotId, count, linearAggregate(sent, sha256)),
    };
    const real = uploadedSnapshots(testEc2Client(client));
    const refused = new Ec2CallError(
      "DeleteSnapshot",
      classifyEc2Error(Object.assign(new Error("not authorized"), { name: "UnauthorizedOperation" })),
      undefined,
    );
    const keeping = { ...real, discard: () => Promise.reject(refused) };
    const error = await runSnapshotUpload(uploadDeps(client, { writer: swapping, snapshots: keeping }), {
      ...uploadSettings(image, manifest),
      verifyAll: true,
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(error instanceof SnapshotVerifyError, "the read-back check refuses it");
    t.match(error, {
      message: new RegExp(
        "1 of the \\d+ blocks read back differ from the image .*keeps ebs-cache:unverified, so nothing takes " +
          "it, but it could not be deleted: EC2 DeleteSnapshot failed",
      ),
      remediation: /aws ec2 delete-snapshot --snapshot-id snap-/,
      disposal: { deleted: false },
    });
    const left = await read();
    t.equal(left.status, "rejected");
    t.match(await tagsOf(left.snapshotId), { [SnapshotTag.unverified]: "true" }, "completed in EBS, still tagged");
    t.same(await chosen(), { boot: older, keeper: older }, "the newer, wrong snapshot is passed over by every reader");
    const lines: string[] = [];
    const rerun = await runSnapshotUpload(uploadDeps(client, { lines }), uploadSettings(image, manifest));
    t.same(rerun.abandoned, [left.snapshotId], "the rerun abandons it without reading it again");
    t.notOk(
      lines.some((l) => l.includes("snapshot.reconcile")),
      "… never checking it again (a sample could miss it)",
    );
    t.equal(await tagsOf(left.snapshotId), undefined, "… deletes it now that it can");
    t.same(
      await chosen(),
      { boot: rerun.snapshotId, keeper: rerun.snapshotId },
      "the new upload, read back, is current",
    );
  },
);
