/**
 * What a rerun of `snapshot upload` finds of the snapshot its manifest names, against the lab's
 * EBS direct emulator: completed by the run that was killed before its manifest said so (read
 * back and recorded; nothing put, never stuck), in `error` because its Timeout passed (abandoned
 * for a fresh upload), completed but not holding the image (refused before the manifest says
 * completed, then abandoned by the rerun); and the read-back check itself, which finds a block
 * EBS put elsewhere than asked.
 */
import { DescribeSnapshotsCommand } from "@aws-sdk/client-ec2";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t, { type Test } from "tap";
import { parseManifest } from "../../../src/agent/snapshot/manifest.ts";
import { EBS_BLOCK_BYTES } from "../../../src/agent/snapshot/plan.ts";
import { runSnapshotUpload } from "../../../src/agent/snapshot/run.ts";
import { SnapshotVerifyError } from "../../../src/agent/snapshot/verify.ts";
import { snapshotBlockWriter } from "../../../src/aws/ebs.ts";
import { scanImage } from "../../../src/host/image-blocks.ts";
import { readManifestJson } from "../../../src/host/snapshot-manifest.ts";
import { makePoolImage } from "../../fixtures/pool-image.ts";
import { testEbsClient, uploadDeps, uploadSettings } from "../../fixtures/snapshot-upload.ts";
import { startLab, type Lab } from "../../lab/ec2/helpers.ts";

async function setup(t: Test, lab: Lab) {
  const dir = await mkdtemp(join(tmpdir(), "upload-reconcile-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const image = join(dir, "set.img");
  await makePoolImage(image);
  const client = testEbsClient(t, lab.emu.endpoint, 1);
  const manifest = join(dir, "gen.json");
  const read = async () => parseManifest(manifest, await readManifestJson(manifest));
  const holdsImage = async (snapshotId: string) => {
    const expected = (await scanImage(image, EBS_BLOCK_BYTES)).blocks;
    const held = lab.backend.snapshotBlocks.get(snapshotId) ?? new Map<number, Buffer>();
    return [...held.keys()].sort((a, b) => a - b).join() === [...expected.keys()].sort((a, b) => a - b).join();
  };
  return { dir, image, client, manifest, read, holdsImage };
}

t.test(
  "killed between CompleteSnapshot and the manifest: the rerun finds it completed, checks it, records it",
  async (t) => {
    const lab = await startLab(t);
    const { image, client, manifest, read, holdsImage } = await setup(t, lab);
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
    await t.rejects(runSnapshotUpload(uploadDeps(client), uploadSettings(image, manifest)), {
      message: /already completed/,
    });
  },
);

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
  const ec2 = lab.client();
  const described = await ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: [left.snapshotId] }));
  t.equal(described.Snapshots?.[0]?.State, "error", "EBS failed the abandoned one (the emulator, as EBS does)");
  t.match(await read(), { status: "completed", snapshotId: rerun.snapshotId });
});

t.test("completed without the image: refused before the manifest says completed, abandoned by the rerun", async (t) => {
  const lab = await startLab(t);
  const { image, client, manifest, read, holdsImage } = await setup(t, lab);
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
  const error = await runSnapshotUpload(uploadDeps(client, { writer: shifting }), uploadSettings(image, manifest)).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(error instanceof SnapshotVerifyError, "the read-back check refuses it");
  t.match(error, {
    message: new RegExp(`does not hold the image: 1 blocks holding data in the image are not in it \\(${last}\\)`),
    remediation: /delete it .*aws ec2 delete-snapshot/,
    exitCode: 1,
  });
  const left = await read();
  t.not(left.status, "completed", "the manifest does not say completed: it is never a parent");
  const rerun = await runSnapshotUpload(uploadDeps(client), { ...uploadSettings(image, manifest), verifyAll: true });
  t.same(rerun.abandoned, [left.snapshotId], "the rerun abandons the completed, wrong one");
  t.not(rerun.snapshotId, left.snapshotId);
  t.match(rerun, { status: "completed", reconciled: false, verified: { all: true } });
  t.ok(await holdsImage(rerun.snapshotId), "the new snapshot holds the image");
});
