/**
 * The snapshot upload's pure checks: what it is asked (src/agent/snapshot/settings.ts), the image
 * set record against the tags (image-set-record.ts), the read-back sample (verify.ts), and the
 * line it prints, which says where the parent's hashes came from (src/cli/snapshot.ts).
 */
import t from "tap";
import {
  imageSetMismatch,
  imageSetRecordText,
  parseImageSetRecord,
} from "../../../src/agent/snapshot/image-set-record.ts";
import type { SnapshotUploadReport } from "../../../src/agent/snapshot/run.ts";
import { checkUploadSettings, type SnapshotUploadSettings } from "../../../src/agent/snapshot/settings.ts";
import { pickSample } from "../../../src/agent/snapshot/verify.ts";
import { uploadSummary } from "../../../src/cli/snapshot.ts";
import { DEFAULT_RECORD } from "../../fixtures/builders/pool-image.ts";
import { generationTagsFor } from "../../fixtures/lab/snapshot-upload.ts";
import { SnapshotTag } from "../../../src/tags.ts";

const range = (n: number) => Array.from({ length: n }, (_, i) => i);

const base: SnapshotUploadSettings = {
  image: "/b/set.img",
  manifest: "/b/gen.json",
  tags: generationTagsFor(),
  description: "d",
  encrypted: false,
  concurrency: 16,
  timeoutMinutes: 60,
};

t.test("the settings: what EBS's model refuses is refused before the call, every problem named", async (t) => {
  t.same(checkUploadSettings(base), []);
  t.same(checkUploadSettings({ ...base, timeoutMinutes: 10 }), [], "10 minutes, the least");
  t.same(checkUploadSettings({ ...base, timeoutMinutes: 4320 }), [], "4320 minutes, the most");
  const key = "arn:aws:kms:eu-central-1:123456789012:key/mrk-1234abcd";
  t.same(checkUploadSettings({ ...base, encrypted: true, kmsKeyArn: key }), [], "a key's ARN, no parent");
  const problems = checkUploadSettings({
    ...base,
    parentSnapshotId: "vol-0123456789abcdef0",
    encrypted: true,
    kmsKeyArn: "1234abcd-12ab",
    timeoutMinutes: 9,
    volumeSizeGiB: 0,
    concurrency: 0,
    description: "x".repeat(256),
    parentManifest: "/b/gen.json",
  });
  for (const pattern of [
    /--parent-snapshot "vol-0123456789abcdef0" is not a snapshot id/,
    /do not go with a parent/,
    /"1234abcd-12ab" is not a KMS key's ARN/,
    /--timeout-minutes 9 is outside 10-4320/,
    /--size-gib 0 is outside 1-65536/,
    /--concurrency 0/,
    /256 characters/,
    /--parent is the manifest being written/,
  ])
    t.ok(
      problems.some((p) => pattern.test(p)),
      String(pattern),
    );
  t.equal(problems.length, 8, "all of them at once");
});

t.test("the tags leave room for the upload's ebs-cache:unverified, and never name it", async (t) => {
  const many = (n: number) => ({ ...generationTagsFor(), ...Object.fromEntries(range(n).map((i) => [`k${i}`, "v"])) });
  const own = Object.keys(generationTagsFor()).length;
  t.same(checkUploadSettings({ ...base, tags: many(49 - own) }), [], "49 tags: with the upload's, a snapshot's 50");
  t.match(
    checkUploadSettings({ ...base, tags: many(50 - own) }),
    [/50 tags and the upload's ebs-cache:unverified; a snapshot carries 50/],
    "50 tags: no room for it",
  );
  t.match(checkUploadSettings({ ...base, tags: { ...base.tags, [SnapshotTag.unverified]: "false" } }), [
    /the tags name ebs-cache:unverified, which the upload sets and removes itself/,
  ]);
});

t.test("the image set record: read back as written, compared with the tags as a set", async (t) => {
  t.same(parseImageSetRecord(imageSetRecordText(DEFAULT_RECORD)), DEFAULT_RECORD);
  t.same(parseImageSetRecord("{"), { problem: "is not JSON" });
  t.match(parseImageSetRecord(JSON.stringify({ format: "x" })), { problem: /format/ });
  t.match(parseImageSetRecord(imageSetRecordText({ ...DEFAULT_RECORD, images: [] })), { problem: "names no images" });
  t.same(imageSetMismatch(DEFAULT_RECORD, generationTagsFor()), []);
  const two = { ...DEFAULT_RECORD, images: ["b:1", "a:1"] };
  const tags = { ...generationTagsFor(), "ebs-cache:images": "a:1,b:1" };
  t.same(imageSetMismatch(two, tags), [], "the order given does not matter");
  t.same(imageSetMismatch(two, { ...tags, "ebs-cache:images": "a:1,c:1" }), [
    "it does not hold c:1",
    "it also holds b:1, which --images does not name",
  ]);
});

t.test("the read-back sample: as many as asked, each once, all when there are no more", async (t) => {
  const indices = Array.from({ length: 100 }, (_, i) => i * 3);
  const sample = pickSample(indices, 32);
  t.equal(sample.length, 32);
  t.equal(new Set(sample).size, 32, "no block twice");
  t.ok(
    sample.every((i) => indices.includes(i)),
    "only blocks listed",
  );
  t.same(pickSample([4, 2], 32), [4, 2], "fewer than asked: all");
  t.same(
    pickSample([0, 1, 2, 3], 2, () => 0),
    [0, 1],
    "drawn by the draw given",
  );
});

t.test("the printed line says where the parent's hashes came from", async (t) => {
  const report: SnapshotUploadReport = {
    snapshotId: "snap-0123456789abcdef1",
    parentSnapshotId: "snap-0123456789abcdef0",
    status: "completed",
    volumeSizeGiB: 1,
    imageBytes: 2 ** 30,
    imageBlocks: 10,
    put: 2,
    zeros: 1,
    unchanged: 8,
    resumed: 0,
    bytesPut: 2 * 2 ** 19,
    parentHashes: "read back",
    parentBytesRead: 9 * 2 ** 19,
    verified: { listed: 10, read: 10, all: false },
    reconciled: false,
    abandoned: [],
    seconds: 1,
  };
  t.match(
    uploadSummary(report),
    /its hashes read back from EBS: 4\.5 MiB downloaded; its manifest, given with --parent/,
  );
  t.match(uploadSummary({ ...report, parentHashes: "manifest", parentBytesRead: 0 }), /its hashes from its manifest/);
  t.match(uploadSummary({ ...report, reconciled: true }), /completed by an earlier run, found so and checked/);
  t.match(uploadSummary({ ...report, abandoned: ["snap-0123456789abcdef2"] }), /abandoned: snap-0123456789abcdef2/);
});
