/**
 * `snapshot upload` in-process, without root: the real EBS SDK client over HTTP to the lab's
 * EBS direct emulator (on the EC2 emulator, memory backend), a pool image made by mkfs.xfs in a
 * temp dir (test/fixtures/builders/pool-image.ts). A full upload puts exactly the image's blocks holding
 * data; an incremental one only what changed (zeros over cleared blocks); a killed one resumes
 * without putting twice, rerun by the CLI too (with the interrupted upload's build time, as EBS's
 * ClientToken needs, also when it was killed before StartSnapshot's answer was recorded); every
 * upload is read back before its manifest says completed; volumes made from the result hold the
 * image; bad input changes nothing.
 */
import { DescribeSnapshotsCommand, CreateVolumeCommand } from "@aws-sdk/client-ec2";
import { execa } from "execa";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t, { type Test } from "tap";
import { ManifestError } from "../../../src/agent/snapshot/manifest.ts";
import { EBS_BLOCK_BYTES } from "../../../src/agent/snapshot/plan.ts";
import { SnapshotUploadError, runSnapshotUpload } from "../../../src/agent/snapshot/run.ts";
import { generationTags } from "../../../src/agent/snapshot/tags.ts";
import { snapshotBlockWriter } from "../../../src/aws/ebs.ts";
import { scanImage, sha256 } from "../../../src/host/image-blocks.ts";
import { readManifestJson } from "../../../src/host/snapshot-manifest.ts";
import { parseManifest } from "../../../src/agent/snapshot/manifest.ts";
import { run } from "../../../src/exec.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { childEnv } from "../../fixtures/lab/lab-prereq.ts";
import {
  DEFAULT_RECORD,
  blocksInside,
  makePoolImage,
  randomBlock as block,
  writeBlocks,
} from "../../fixtures/builders/pool-image.ts";
import { generationTagsFor, testEbsClient, uploadDeps, uploadSettings } from "../../fixtures/lab/snapshot-upload.ts";
import { AWS_CLI, AWS_CLI_EMULATOR_ENV, startLab } from "../../lab/ec2/helpers.ts";

t.test("snapshot upload against the lab's EBS direct emulator", async (t) => {
  const lab = await startLab(t);
  const dir = await mkdtemp(join(tmpdir(), "snapshot-upload-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const client = testEbsClient(t, lab.emu.endpoint);
  const tags = generationTagsFor();
  const lines: string[] = [];
  const deps = (writer = snapshotBlockWriter(client), signal?: AbortSignal) =>
    uploadDeps(client, { lines, writer, ...(signal ? { signal } : {}) });
  const image = join(dir, "set.img");
  const settings = (manifest: string, parentManifest?: string) =>
    uploadSettings(image, join(dir, manifest), {
      ...(parentManifest ? { parentManifest: join(dir, parentManifest) } : {}),
    });
  const snapshotBlocks = (id: string) => lab.backend.snapshotBlocks.get(id) ?? new Map<number, Buffer>();
  const imageBlocks = async () => (await scanImage(image, EBS_BLOCK_BYTES)).blocks;
  const sameContent = async (
    t: { same: (a: unknown, b: unknown, m: string) => void; ok: (v: unknown, m: string) => void },
    snapshotId: string,
  ) => {
    const expected = await imageBlocks();
    const held = snapshotBlocks(snapshotId);
    t.same(
      [...held.keys()].sort((a, b) => a - b),
      [...expected.keys()].sort((a, b) => a - b),
      "the snapshot holds data exactly where the image does",
    );
    t.ok(
      [...held].every(([i, data]) => sha256(data).toString("base64") === expected.get(i)),
      "… the same bytes",
    );
  };

  // Generation 1: a pool image of 1 GiB holding 4 MiB of a layer and 8 MiB of zeros written.
  await makePoolImage(image, { files: { layer: { mib: 4 }, spare: { mib: 8, zeros: true } } });
  const layer = await blocksInside(image, "/docker/layer");
  const spare = await blocksInside(image, "/docker/spare");
  t.ok(layer.length >= 6 && spare.length >= 12, "the layer's and the spare file's blocks are found in the image");
  const data1 = await imageBlocks();

  const full = await runSnapshotUpload(deps(), settings("gen1.json"));
  t.equal(full.put, data1.size, "a full upload puts every block holding data, none of the holes");
  t.ok(data1.size < 2048 / 4, `… a few of the image's 2048 blocks (${data1.size})`);
  t.equal(full.bytesPut / data1.size / EBS_BLOCK_BYTES, 1, "bytes put ÷ bytes of data = 1");
  t.equal(full.status, "completed");
  t.match(
    full.verified,
    { listed: data1.size, read: Math.min(32, data1.size), all: false },
    "a sample of (at most) 32 blocks read back",
  );
  await sameContent(t, full.snapshotId);
  const ec2 = lab.client();
  const described = await ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: [full.snapshotId] }));
  const snap = described.Snapshots?.[0];
  t.equal(snap?.State, "completed", "EC2 lists the snapshot, completed");
  t.equal(snap?.VolumeSize, 1, "the image's 1 GiB");
  t.same(
    Object.fromEntries((snap?.Tags ?? []).map((tag) => [tag.Key, tag.Value])),
    tags,
    "tagged as the pool's generation, as Packer's flow tags it, with the operator's tag",
  );
  const volume = await ec2.send(
    new CreateVolumeCommand({ SnapshotId: full.snapshotId, AvailabilityZone: "us-east-1a" }),
  );
  t.ok(volume.VolumeId, "a volume can be created from it");
  const gen1 = parseManifest("gen1.json", await readManifestJson(join(dir, "gen1.json")));
  t.match(gen1, { status: "completed", verified: { listed: data1.size } }, "the manifest says so");

  await t.rejects(
    runSnapshotUpload(deps(), settings("gen1.json")),
    SnapshotUploadError,
    "a completed build is not uploaded again",
  );

  // Generation 2: one block of the layer changed, one cleared, one added in the spare file.
  await writeBlocks(image, { [layer[1]!]: block(), [layer[3]!]: null, [spare[2]!]: block() });
  const incremental = await runSnapshotUpload(deps(), {
    ...settings("gen2.json", "gen1.json"),
    verifyAll: true,
  });
  t.equal(incremental.parentSnapshotId, full.snapshotId, "started from the previous generation");
  t.equal(incremental.put, 3, "only the changed, the cleared and the added block are put");
  t.equal(incremental.zeros, 1, "zeros go over the cleared block");
  t.equal(incremental.unchanged, data1.size - 2, "the unchanged blocks stay the parent's");
  t.match(incremental, { parentHashes: "manifest", parentBytesRead: 0 }, "the parent's hashes from its manifest");
  t.match(incremental.verified, { listed: data1.size, read: data1.size, all: true }, "--verify reads every block");
  await sameContent(t, incremental.snapshotId);
  t.same(snapshotBlocks(full.snapshotId).has(layer[3]!), true, "the parent is unchanged");

  // The same generation with the parent's manifest lost: the parent's blocks read back from EBS.
  const fromEbs = await runSnapshotUpload(deps(), {
    ...settings("gen2-from-ebs.json"),
    parentSnapshotId: full.snapshotId,
  });
  t.equal(fromEbs.parentSnapshotId, full.snapshotId, "started from the snapshot named");
  t.match(
    fromEbs,
    { put: incremental.put, zeros: incremental.zeros, unchanged: incremental.unchanged, parentHashes: "read back" },
    "ListSnapshotBlocks and GetSnapshotBlock's checksums plan what the manifest planned",
  );
  t.equal(fromEbs.parentBytesRead, (data1.size - 1) * EBS_BLOCK_BYTES, "… each block the image shares downloaded");
  await sameContent(t, fromEbs.snapshotId);

  // Generation 3, killed after 2 puts, then resumed.
  const third: Record<number, Buffer> = {};
  for (const i of spare.slice(3, 9)) third[i] = block();
  await writeBlocks(image, third);
  const controller = new AbortController();
  const base = snapshotBlockWriter(client);
  let puts = 0;
  const killing = {
    ...base,
    async putBlock(...args: Parameters<typeof base.putBlock>) {
      await base.putBlock(...args);
      if (++puts === 2) controller.abort(new Error("killed"));
    },
  };
  const killed = runSnapshotUpload(deps(killing, controller.signal), {
    ...settings("gen3.json", "gen2.json"),
    concurrency: 1,
  });
  await t.rejects(
    killed,
    { name: "SnapshotUploadError", message: /stopped \(killed\)/, exitCode: 1, remediation: /resumes/ },
    "the kill stops the upload between blocks: an error of the upload's own (exit 1), no bug",
  );
  const left = parseManifest("gen3.json", await readManifestJson(join(dir, "gen3.json")));
  t.equal(left?.status, "uploading", "the manifest says the upload is unfinished");
  t.equal(Object.keys(left?.written ?? {}).length, 2, "… with the 2 blocks put");
  const resumed = await runSnapshotUpload(deps(), settings("gen3.json", "gen2.json"));
  t.equal(resumed.snapshotId, left?.snapshotId, "the resume writes the same snapshot (StartSnapshot's ClientToken)");
  t.equal(resumed.resumed, 2, "the 2 blocks put before the kill are not put again");
  t.equal(resumed.put, 4);
  await sameContent(t, resumed.snapshotId);

  // Refusals change nothing.
  await writeBlocks(image, { [spare[10]!]: block() });
  const before = lab.emu.snapshotState().snapshots;
  await t.rejects(
    runSnapshotUpload(deps(), settings("gen4.json", "missing.json")),
    ManifestError,
    "a parent manifest that does not exist is refused",
  );
  await writeFile(join(dir, "bad.json"), JSON.stringify({ format: "x" }));
  await t.rejects(runSnapshotUpload(deps(), settings("bad.json")), ManifestError, "a foreign manifest is refused");
  t.same(Object.keys(lab.emu.snapshotState().snapshots), Object.keys(before), "… and no snapshot was started");
  t.match(await readFile(join(dir, "bad.json"), "utf8"), /"x"/, "… and the foreign manifest is left as it was");
  t.ok(
    lines.some((l) => l.includes("snapshot.completed")),
    "the completion is logged",
  );
  // The shared progress line, each step's last one (a step's end is always told; no timing asserted).
  t.ok(
    lines.some((l) => /snapshot\.progress: step 1 of 2, scan: 100\.0 % \(.+ of .+\)/.test(l)),
    "the scan's progress is logged",
  );
  t.ok(
    lines.some((l) => /snapshot\.progress: step 2 of 2, put: 100\.0 % \(.+ of .+\)/.test(l)),
    "the puts' progress is logged",
  );
});

t.test("the EBS direct emulator checks what EBS checks", async (t) => {
  const lab = await startLab(t);
  const client = testEbsClient(t, lab.emu.endpoint, 1);
  const writer = snapshotBlockWriter(client);
  const started = await writer.start({
    volumeSizeGiB: 1,
    clientToken: "t-1",
    description: "",
    tags: {},
    encrypted: false,
    timeoutMinutes: 60,
  });
  t.equal(started.status, "pending");
  const data = block();
  const good = sha256(data).toString("base64");
  await t.rejects(
    writer.putBlock(started.snapshotId, 0, data, sha256(block()).toString("base64")),
    /checksum/,
    "a wrong checksum is refused",
  );
  await t.rejects(
    writer.putBlock(started.snapshotId, 2048, data, good),
    /outside/,
    "an index past the size is refused",
  );
  await writer.putBlock(started.snapshotId, 3, data, good);
  await t.rejects(writer.complete(started.snapshotId, 2, good), /ChangedBlocksCount/, "a wrong block count is refused");
  const again = await writer.start({
    volumeSizeGiB: 1,
    clientToken: "t-1",
    description: "",
    tags: {},
    encrypted: false,
    timeoutMinutes: 60,
  });
  t.equal(again.snapshotId, started.snapshotId, "the same ClientToken gives the same snapshot");
  await t.rejects(
    writer.start({
      volumeSizeGiB: 2,
      clientToken: "t-1",
      description: "",
      tags: {},
      encrypted: false,
      timeoutMinutes: 60,
    }),
    /ClientToken/,
    "the same ClientToken with other parameters is a conflict",
  );
  const status = await writer.complete(started.snapshotId, 1, sha256(sha256(data)).toString("base64"));
  t.equal(status, "completed");
  await t.rejects(
    writer.putBlock(started.snapshotId, 4, data, good),
    /completed/,
    "a completed snapshot takes no more blocks",
  );
  await t.rejects(
    writer.start({
      volumeSizeGiB: 1,
      parentSnapshotId: "snap-0123456789abcdef0",
      clientToken: "t-2",
      description: "",
      tags: {},
      encrypted: false,
      timeoutMinutes: 60,
    }),
    /does not exist/,
    "an unknown parent is refused",
  );
});

t.test("the aws CLI's `ebs` commands accept the emulator", async (t) => {
  const lab = await startLab(t);
  const aws = async (args: string[]) => {
    const result = await run(
      AWS_CLI,
      ["ebs", ...args, "--endpoint-url", lab.emu.endpoint, "--region", "us-east-1", "--output", "json"],
      {
        check: false,
        timeoutMs: 120_000,
        env: { ...AWS_CLI_EMULATOR_ENV, AWS_MAX_ATTEMPTS: "1" },
      },
    );
    t.equal(result.exitCode, 0, `aws ebs ${args[0]}: ${result.stderr.trim().split("\n").pop() ?? ""}`);
    return JSON.parse(result.stdout || "{}") as Record<string, unknown>;
  };
  const started = await aws(["start-snapshot", "--volume-size", "1", "--description", "from the CLI"]);
  t.equal(started.Status, "pending");
  t.equal(started.BlockSize, EBS_BLOCK_BYTES);
  const id = String(started.SnapshotId);
  const dir = await mkdtemp(join(tmpdir(), "snapshot-cli-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const data = block();
  await writeFile(join(dir, "block"), data);
  const checksum = sha256(data).toString("base64");
  await aws([
    "put-snapshot-block",
    "--snapshot-id",
    id,
    "--block-index",
    "5",
    "--block-data",
    join(dir, "block"),
    "--data-length",
    String(EBS_BLOCK_BYTES),
    "--checksum",
    checksum,
    "--checksum-algorithm",
    "SHA256",
  ]);
  const completed = await aws(["complete-snapshot", "--snapshot-id", id, "--changed-blocks-count", "1"]);
  t.equal(completed.Status, "completed");
  const listed = await aws(["list-snapshot-blocks", "--snapshot-id", id]);
  t.same(
    (listed.Blocks as { BlockIndex: number }[]).map((b) => b.BlockIndex),
    [5],
    "list-snapshot-blocks shows the one block",
  );
  const changed = await aws(["list-changed-blocks", "--second-snapshot-id", id]);
  t.same(
    (changed.ChangedBlocks as { BlockIndex: number }[]).map((b) => b.BlockIndex),
    [5],
  );
  const token = (listed.Blocks as { BlockToken: string }[])[0]!.BlockToken;
  await aws([
    "get-snapshot-block",
    "--snapshot-id",
    id,
    "--block-index",
    "5",
    "--block-token",
    token,
    join(dir, "out"),
  ]);
  t.ok((await readFile(join(dir, "out"))).equals(data), "get-snapshot-block returns the bytes put");
});

/** A generation's pool image (one image) and its tags, built at `builtAt`, with a lab and an EBS client for it. */
async function generationToUpload(t: Test, prefix: string) {
  const lab = await startLab(t);
  const dir = await mkdtemp(join(tmpdir(), prefix));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const image = join(dir, "set.img");
  const manifest = join(dir, "gen.json");
  await makePoolImage(image, { record: { ...DEFAULT_RECORD, images: ["registry.example.org/app:1"] } });
  const builtAt = "2026-12-02T01:00:00Z";
  const tags = generationTags({
    pool: "sim4life",
    imageSet: "2026-12",
    images: ["registry.example.org/app:1"],
    imageStore: "graphdriver",
    engineVersion: "28.5.1",
    builtAt,
    operatorTags: {},
  });
  if (!("tags" in tags)) throw new Error(tags.problems.join("; "));
  return { lab, image, manifest, builtAt, tags, client: testEbsClient(t, lab.emu.endpoint) };
}

/** The CLI's `snapshot upload` of that generation again, as an operator reruns it: no --built-at. */
function uploadAgain(endpoint: string, image: string, manifest: string, extra: string[] = []) {
  return execa(
    process.execPath,
    [
      ...["src/cli.ts", "snapshot", "upload", "--image", image, "--manifest", manifest],
      ...["--pool", "sim4life", "--image-set", "2026-12", "--images", "registry.example.org/app:1"],
      ...["--image-store", "graphdriver", "--engine-version", "28.5.1", ...extra],
      ...["--region", "us-east-1", "--endpoint", endpoint, "--ec2-endpoint", endpoint, "--json"],
    ],
    {
      env: { ...childEnv(), AWS_ACCESS_KEY_ID: "dummy", AWS_SECRET_ACCESS_KEY: "dummy" },
      extendEnv: false,
      reject: false,
    },
  );
}

t.test("the CLI resumes an upload a stop interrupted: without --built-at, the interrupted one's", async (t) => {
  const { lab, image, manifest, builtAt, tags, client } = await generationToUpload(t, "snapshot-resume-");
  // The run the stop interrupted, started at `builtAt`, as the CLI starts it: stopped after 2 puts.
  const controller = new AbortController();
  const writer = snapshotBlockWriter(client);
  let puts = 0;
  const stopped = runSnapshotUpload(
    uploadDeps(client, {
      writer: {
        ...writer,
        async putBlock(...args: Parameters<typeof writer.putBlock>) {
          await writer.putBlock(...args);
          if (++puts === 2) controller.abort(new Error("SIGTERM received"));
        },
      },
      signal: controller.signal,
    }),
    uploadSettings(image, manifest, {
      tags: tags.tags,
      description: "ebs-cache golden snapshot: pool sim4life, image set 2026-12",
      concurrency: 1,
    }),
  );
  await t.rejects(stopped, { name: "SnapshotUploadError" });

  // The same command again, later, as an operator reruns it: no --built-at.
  const rerun = await uploadAgain(lab.emu.endpoint, image, manifest, ["--concurrency", "1"]);
  t.equal(rerun.exitCode, 0, String(rerun.stderr));
  const report = JSON.parse(String(rerun.stdout || "{}")) as { resumed?: number; put?: number; status?: string };
  const blocks = (await scanImage(image, EBS_BLOCK_BYTES)).blocks.size;
  t.match(
    report,
    { status: "completed", resumed: 2, put: blocks - 2 },
    "the 2 blocks put before the stop are not put again",
  );
  const snapshots = Object.values(lab.emu.snapshotState().snapshots);
  t.equal(snapshots.length, 1, "one snapshot: the interrupted one, resumed");
  t.match(snapshots[0]?.tags, { [VolumeTag.builtAt]: builtAt }, "tagged with the interrupted upload's build time");
});

t.test(
  "the CLI reruns an upload killed once StartSnapshot was applied: the starting manifest's build time",
  async (t) => {
    const { lab, image, manifest, builtAt, tags, client } = await generationToUpload(t, "snapshot-starting-");
    // The run killed at `builtAt`, as the CLI starts it: EBS made the snapshot, its answer was lost.
    const writer = snapshotBlockWriter(client);
    const killed = runSnapshotUpload(
      uploadDeps(client, {
        writer: {
          ...writer,
          async start(...args: Parameters<typeof writer.start>) {
            await writer.start(...args);
            throw new Error("killed once StartSnapshot was applied");
          },
        },
      }),
      uploadSettings(image, manifest, {
        tags: tags.tags,
        description: "ebs-cache golden snapshot: pool sim4life, image set 2026-12",
      }),
    );
    await t.rejects(killed, { message: /killed once/ });
    t.match(parseManifest("gen.json", await readManifestJson(manifest)), { status: "starting" });
    const [left] = Object.keys(lab.emu.snapshotState().snapshots);

    // The same command again, later, without --built-at: the token is asked with the same tags.
    const rerun = await uploadAgain(lab.emu.endpoint, image, manifest);
    t.equal(rerun.exitCode, 0, String(rerun.stderr));
    const report = JSON.parse(String(rerun.stdout || "{}")) as { snapshotId?: string; status?: string };
    t.match(report, { snapshotId: left, status: "completed" }, "the rerun writes the snapshot the killed run started");
    const snapshots = Object.values(lab.emu.snapshotState().snapshots);
    t.equal(snapshots.length, 1, "one snapshot in all");
    t.match(snapshots[0]?.tags, { [VolumeTag.builtAt]: builtAt }, "tagged with the killed upload's build time");
  },
);
