/**
 * What `snapshot upload` refuses before any call to EBS, and what the lab's EBS direct emulator
 * refuses as EBS does (so the lab catches the next such request): Encrypted or a KMS key with a
 * parent, a Timeout outside 10-4320, a KMS key that is no key ARN; any file but a pool image (XFS
 * labelled ebs-cache, the layout a boot accepts, whole, with the image set record of the tags);
 * a --size-gib smaller than the image or the parent, or another than the upload it resumes.
 */
import { mkdtemp, rm, truncate, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { runSnapshotUpload, type SnapshotUploadSettings } from "../../../src/agent/snapshot/run.ts";
import { snapshotBlockWriter } from "../../../src/aws/ebs.ts";
import { ExitCode } from "../../../src/errors.ts";
import { run } from "../../../src/exec.ts";
import { DEFAULT_RECORD, makePoolImage } from "../../fixtures/builders/pool-image.ts";
import { testEbsClient, uploadDeps, uploadSettings } from "../../fixtures/lab/snapshot-upload.ts";
import { startLab } from "../../lab/ec2/helpers.ts";

const KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";

t.test("refused before any call, with every problem named", async (t) => {
  const lab = await startLab(t);
  const dir = await mkdtemp(join(tmpdir(), "upload-refusals-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const image = join(dir, "set.img");
  await makePoolImage(image);
  const client = testEbsClient(t, lab.emu.endpoint, 1);
  const parent = await runSnapshotUpload(uploadDeps(client), uploadSettings(image, join(dir, "parent.json")));
  const snapshots = () => Object.keys(lab.emu.snapshotState().snapshots).length;
  const refused = async (name: string, more: Partial<SnapshotUploadSettings>, says: RegExp, file = image) => {
    const before = snapshots();
    await t.rejects(
      runSnapshotUpload(uploadDeps(client), { ...uploadSettings(file, join(dir, `${name}.json`)), ...more }),
      { message: says, exitCode: ExitCode.usage },
      name,
    );
    t.equal(snapshots(), before, `${name}: nothing started`);
  };
  const withParent = { parentManifest: join(dir, "parent.json") };

  await refused(
    "encrypted with a parent",
    { ...withParent, encrypted: true },
    /refuses Encrypted with ParentSnapshotId/,
  );
  await refused("a key with a parent", { ...withParent, encrypted: true, kmsKeyArn: KEY }, /do not go with a parent/);
  await refused(
    "encrypted with a parent snapshot",
    { parentSnapshotId: parent.snapshotId, encrypted: true },
    /do not go with a parent/,
  );
  await refused("a timeout under 10", { timeoutMinutes: 5 }, /--timeout-minutes 5 is outside 10-4320/);
  await refused("a timeout over 4320", { timeoutMinutes: 4321 }, /--timeout-minutes 4321 is outside 10-4320/);
  await refused("a key alias", { encrypted: true, kmsKeyArn: "alias/aws/ebs" }, /is not a KMS key's ARN/);
  await refused(
    "all at once",
    { ...withParent, encrypted: true, timeoutMinutes: 0, volumeSizeGiB: 70000 },
    /do not go with a parent.*--timeout-minutes 0.*--size-gib 70000 is outside 1-65536/,
  );

  // Only a pool image, of the image set the tags name.
  const json = join(dir, "set.json");
  await writeFile(json, JSON.stringify({ not: "an image" }));
  await refused("a JSON file", {}, /set\.json holds .*not a pool image/, json);
  const other = join(dir, "other.img");
  await makePoolImage(other, { label: "data" });
  await refused("another label", {}, /other\.img holds an xfs filesystem labelled "data"/, other);
  const ext4 = join(dir, "ext4.img");
  await run("truncate", ["-s", "64M", ext4]);
  await run("mkfs.ext4", ["-q", "-F", "-L", "ebs-cache", ext4]);
  await refused("an ext4 labelled ebs-cache", {}, /holds an ext4 filesystem/, ext4);
  const bare = join(dir, "bare.img");
  await makePoolImage(bare, { noDataRoot: true });
  await refused("no docker/ at its root", {}, /without the docker\/ data-root folder/, bare);
  const unrecorded = join(dir, "unrecorded.img");
  await makePoolImage(unrecorded, { record: null });
  await refused("no image set record", {}, /not an image `snapshot build` made: the record .* is missing/, unrecorded);
  const garbled = join(dir, "garbled.img");
  await makePoolImage(garbled, { record: { text: "{" } });
  await refused("a record that is not JSON", {}, /record of its image set is not JSON/, garbled);
  const others = join(dir, "others.img");
  await makePoolImage(others, { record: { ...DEFAULT_RECORD, images: ["registry.example.org/other:1"] } });
  await refused(
    "another image set",
    {},
    /hold the image set the tags would name: it does not hold .*sim4life:3\.1\.0; it also holds .*other:1/,
    others,
  );
  const containerd = join(dir, "containerd.img");
  await makePoolImage(containerd, { record: { ...DEFAULT_RECORD, imageStore: "containerd", engineVersion: "29.0.0" } });
  await refused(
    "another store and engine",
    {},
    /built for the containerd store, not graphdriver; it was built by docker 29\.0\.0, not 28\.5\.1/,
    containerd,
  );
  const cut = join(dir, "cut.img");
  await makePoolImage(cut);
  await truncate(cut, 512 * 2 ** 20);
  await refused("an image cut short", {}, /file system 1073741824 \(the file was cut short\)/, cut);

  // Sizes: never smaller than the image or the parent; a resume keeps its size.
  const big = join(dir, "big.img");
  await makePoolImage(big, { sizeGiB: 2 });
  await refused(
    "a size under the image's",
    { volumeSizeGiB: 1 },
    /--size-gib 1 is smaller than the image \(2 GiB\)/,
    big,
  );
  const bigParent = await runSnapshotUpload(uploadDeps(client), uploadSettings(big, join(dir, "big-parent.json")));
  t.equal(bigParent.volumeSizeGiB, 2, "the image's size by default");
  await refused(
    "a size under the parent's",
    { volumeSizeGiB: 1, parentManifest: join(dir, "big-parent.json") },
    /--size-gib 1 is smaller than the parent snap-[0-9a-f]+ \(2 GiB\)/,
  );
  const controller = new AbortController();
  const base = snapshotBlockWriter(client);
  const stopping = {
    ...base,
    async putBlock(...args: Parameters<typeof base.putBlock>) {
      await base.putBlock(...args);
      controller.abort(new Error("stopped"));
    },
  };
  await t.rejects(
    runSnapshotUpload(uploadDeps(client, { writer: stopping, signal: controller.signal }), {
      ...uploadSettings(image, join(dir, "resized.json")),
      concurrency: 1,
    }),
  );
  const before = snapshots();
  await t.rejects(
    runSnapshotUpload(uploadDeps(client), { ...uploadSettings(image, join(dir, "resized.json")), volumeSizeGiB: 3 }),
    { message: /resumes an upload of 1 GiB, not 3 GiB/, exitCode: ExitCode.usage },
    "a resume of another size",
  );
  t.equal(snapshots(), before, "a resume of another size: nothing started");
});

t.test("the lab's EBS direct refuses what EBS refuses", async (t) => {
  const lab = await startLab(t);
  const dir = await mkdtemp(join(tmpdir(), "upload-refusals-lab-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const image = join(dir, "set.img");
  await makePoolImage(image);
  const client = testEbsClient(t, lab.emu.endpoint, 1);
  const parent = await runSnapshotUpload(uploadDeps(client), uploadSettings(image, join(dir, "parent.json")));
  const writer = snapshotBlockWriter(client);
  const start = (more: Partial<Parameters<typeof writer.start>[0]>) =>
    writer.start({
      volumeSizeGiB: 1,
      clientToken: `t-${Math.random()}`,
      description: "",
      tags: {},
      encrypted: false,
      timeoutMinutes: 60,
      ...more,
    });
  const invalid = { name: "EbsCallError", code: "ValidationException", reason: "INVALID_PARAMETER_VALUE" };
  await t.rejects(start({ parentSnapshotId: parent.snapshotId, encrypted: true }), invalid, "Encrypted with a parent");
  await t.rejects(
    start({ parentSnapshotId: parent.snapshotId, encrypted: true, kmsKeyArn: KEY }),
    invalid,
    "a key with a parent",
  );
  for (const timeoutMinutes of [0, 9, 4321])
    await t.rejects(start({ timeoutMinutes }), invalid, `Timeout ${timeoutMinutes}`);
  for (const timeoutMinutes of [10, 4320])
    t.match(await start({ timeoutMinutes }), { status: "pending" }, `Timeout ${timeoutMinutes} is taken`);
  t.match(await start({ parentSnapshotId: parent.snapshotId }), { status: "pending" }, "a parent without Encrypted");
});
