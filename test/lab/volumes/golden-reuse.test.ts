/**
 * The key of a golden build kept for a test run (src/lab/volumes/golden-reuse.ts): what shapes
 * the volume's bytes changes it, what only tags the snapshot does not.
 */
import t from "tap";
import { goldenBuildKey } from "../../../src/lab/volumes/golden-reuse.ts";
import type { GoldenOptions } from "../../../src/lab/volumes/golden.ts";

const base: GoldenOptions = { pool: "p", imageSet: "s", images: [{ tag: "lab/app:1", payloadBytes: 1024 }] };
const key = goldenBuildKey(base);

t.match(key, /^[0-9a-f]{16}$/, "a file name's worth of hex");
t.equal(goldenBuildKey({ ...base }), key, "the same inputs, the same key");
for (const [what, options] of [
  ["another pool", { ...base, pool: "q" }],
  ["another image set", { ...base, imageSet: "t" }],
  ["another build time", { ...base, builtAt: new Date(0) }],
  ["another zone", { ...base, availabilityZone: "us-east-1b" }],
  ["the operator's tags", { ...base, volume: { tags: { team: "a" } } }],
] as [string, GoldenOptions][]) {
  t.equal(goldenBuildKey(options), key, `${what} only tags the snapshot: the same key`);
}
for (const [what, options] of [
  ["another image", { ...base, images: [{ tag: "lab/app:2", payloadBytes: 1024 }] }],
  ["another payload", { ...base, images: [{ tag: "lab/app:1", payloadBytes: 2048 }] }],
  ["another command", { ...base, images: [{ tag: "lab/app:1", payloadBytes: 1024, cmd: ["true"] }] }],
  ["one more image", { ...base, images: [...base.images, { tag: "lab/tool:1" }] }],
  ["another size", { ...base, sizeGiB: 3 }],
  ["no need list", { ...base, recordReads: false }],
  ["encrypted", { ...base, volume: { encrypted: true } }],
  ["another key", { ...base, volume: { encrypted: true, kmsKeyId: "k" } }],
] as [string, GoldenOptions][]) {
  t.not(goldenBuildKey(options), key, `${what}: another key`);
}
