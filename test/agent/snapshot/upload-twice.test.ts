/**
 * `snapshot upload`, as a process, from one scenario against two EBS directs: the lab's emulator
 * and moto's server (which nobody on this project wrote), each behind the test's adapter
 * (test/fixtures/lab/ebs-twice.ts: it holds answers where a kill goes, and makes up for moto's named
 * deviations, never the product). A full upload, an incremental one, a SIGKILL among the puts
 * and its rerun, a SIGKILL once CompleteSnapshot was applied and its rerun (found completed,
 * checked, recorded; until then tagged ebs-cache:unverified, so the pool's current snapshot as
 * EC2 lists it on either stays the previous one), a SIGKILL once StartSnapshot was applied and
 * its rerun (the token recorded before the request: the same snapshot, one in all): each
 * snapshot read back through the raw SDK and compared with the image, and the two backends'
 * reports the same once ids and times are left out. Then moto as it is: each deviation the
 * adapter names is still there (a moto that closes one fails here and says which; its
 * StartSnapshot keeps no ClientToken, so the start's kill holds on moto only through the
 * adapter's client-token fix), and the product refuses the ones that reach it.
 *
 * moto must be on the machine (scripts/setup.sh checks it): without it this test fails, it never skips.
 */
import {
  EBSClient,
  GetSnapshotBlockCommand,
  ListSnapshotBlocksCommand,
  PutSnapshotBlockCommand,
  StartSnapshotCommand,
} from "@aws-sdk/client-ebs";
import { execa } from "execa";
import { createHash } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t, { type Test } from "tap";
import { parseManifest } from "../../../src/agent/snapshot/manifest.ts";
import { EBS_BLOCK_BYTES } from "../../../src/agent/snapshot/plan.ts";
import { runSnapshotUpload, type SnapshotUploadSettings } from "../../../src/agent/snapshot/run.ts";
import { currentSnapshot } from "../../../src/agent/volume-rules.ts";
import { EbsAnswerError } from "../../../src/aws/ebs-errors.ts";
import { SnapshotTag, VolumeTag } from "../../../src/tags.ts";
import { scanImage } from "../../../src/host/image-blocks.ts";
import { readManifestJson } from "../../../src/host/snapshot-manifest.ts";
import { agentBundle, withCompileCache } from "../../fixtures/lab/agent-bundle.ts";
import { motoVersion } from "../../fixtures/lab/ec2-twice.ts";
import { MOTO_DEVIATIONS, startEbsBackend, type EbsBackend } from "../../fixtures/lab/ebs-twice.ts";
import { childEnv } from "../../fixtures/lab/lab-prereq.ts";
import {
  DEFAULT_RECORD,
  blocksInside,
  makePoolImage,
  randomBlock,
  writeBlocks,
} from "../../fixtures/builders/pool-image.ts";
import {
  generationTagsFor,
  poolSnapshots,
  testEbsClient,
  uploadDeps,
  uploadSettings,
} from "../../fixtures/lab/snapshot-upload.ts";

// Fails (never skips) when the machine lacks moto.
const moto = await motoVersion();
t.comment(`moto ${moto.version} (${moto.python})`);
const bundle = await agentBundle();
/** The tags the killed processes write too (the same ClientToken must come with the same tags). */
const TAGS = generationTagsFor("2026-12-02T01:00:00Z");
const DESCRIPTION = "ebs-cache golden snapshot: pool sim4life, image set 2026-12";
const backends = await Promise.all([
  startEbsBackend("emulator", { motoSeconds: 600 }),
  startEbsBackend("moto", { motoSeconds: 600 }),
]);
t.teardown(() => Promise.all(backends.map((b) => b.close())));

interface Report {
  snapshotId: string;
  status: string;
  put: number;
  zeros: number;
  unchanged: number;
  resumed: number;
  reconciled: boolean;
  abandoned: string[];
  parentHashes?: string;
  parentBytesRead?: number;
  verified: { listed: number; read: number; all: boolean };
}

/**
 * What must be the same on both backends: a report without its ids and times, and without what
 * depends on one difference of theirs that the product meets either way. zero-blocks: a block
 * written with zeros (over a parent's data) stays listed by moto, as EBS lists every block written
 * ("only block indexes and tokens that have data written to them"), while the emulator's memory
 * backend forgets it; so the count of blocks listed and read back differs (and a parent read back
 * from EBS lists them on moto: zeros are put over them again, never data).
 */
const normal = (r: Report) => ({
  status: r.status,
  dataPut: r.put - r.zeros,
  unchanged: r.unchanged,
  reconciled: r.reconciled,
  abandoned: r.abandoned.length,
  parentHashes: r.parentHashes,
  readBackAll: r.verified.all,
});

/** Lists and reads every block of the snapshot with the SDK alone, and compares with the image's. */
async function holdsImage(t: Test, client: EBSClient, snapshotId: string, image: string) {
  const expected = (await scanImage(image, EBS_BLOCK_BYTES)).blocks;
  const listed = await client.send(new ListSnapshotBlocksCommand({ SnapshotId: snapshotId }));
  const blocks = listed.Blocks ?? [];
  const zeros = createHash("sha256").update(Buffer.alloc(EBS_BLOCK_BYTES)).digest("base64");
  let same = 0;
  for (const block of blocks) {
    const got = await client.send(
      new GetSnapshotBlockCommand({
        SnapshotId: snapshotId,
        BlockIndex: block.BlockIndex!,
        BlockToken: block.BlockToken!,
      }),
    );
    const data = await got.BlockData!.transformToByteArray();
    const hash = createHash("sha256").update(data).digest("base64");
    if (hash === (expected.get(block.BlockIndex!) ?? zeros)) same += 1;
  }
  t.ok(
    [...expected.keys()].every((index) => blocks.some((b) => b.BlockIndex === index)),
    `${snapshotId} lists every block holding data in the image`,
  );
  t.equal(same, blocks.length, `… and every block it lists reads back as the image's (${blocks.length})`);
}

/** The scenario on one backend: the reports of its steps, by name. */
async function scenario(t: Test, backend: EbsBackend): Promise<Map<string, Report>> {
  const reports = new Map<string, Report>();
  const dir = await mkdtemp(join(tmpdir(), `upload-twice-${backend.name}-`));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const image = join(dir, "set.img");
  await makePoolImage(image, { files: { layer: { mib: 4 }, spare: { mib: 8, zeros: true } } });
  const layer = await blocksInside(image, "/docker/layer");
  const spare = await blocksInside(image, "/docker/spare");
  const client = new EBSClient({
    region: "us-east-1",
    endpoint: backend.endpoint,
    credentials: { accessKeyId: "twice", secretAccessKey: "twice" },
  });
  t.teardown(() => client.destroy());
  const sdk = testEbsClient(t, backend.endpoint);
  const env = await withCompileCache({ ...childEnv(), AWS_ACCESS_KEY_ID: "twice", AWS_SECRET_ACCESS_KEY: "twice" });
  const upload = (manifest: string, more: string[] = []) =>
    execa(
      process.execPath,
      [
        ...[bundle, "snapshot", "upload", "--image", image, "--manifest", join(dir, manifest)],
        ...["--pool", "sim4life", "--image-set", "2026-12", "--images", DEFAULT_RECORD.images.join(",")],
        ...["--image-store", DEFAULT_RECORD.imageStore, "--engine-version", DEFAULT_RECORD.engineVersion],
        ...["--built-at", "2026-12-02T01:00:00Z", "--concurrency", "1", "--region", "us-east-1"],
        ...["--tag", "team=platform", "--endpoint", backend.endpoint, "--ec2-endpoint", backend.endpoint],
        ...["--json", ...more],
      ],
      { env, extendEnv: false, reject: false },
    );
  /** An upload in-process, as the CLI runs it (the killed runs are processes: a SIGKILL is the point). */
  const step = async (name: string, manifest: string, more: Partial<SnapshotUploadSettings> = {}) => {
    const report = (await runSnapshotUpload(
      uploadDeps(sdk),
      uploadSettings(image, join(dir, manifest), { tags: TAGS, description: DESCRIPTION, concurrency: 1, ...more }),
    )) as Report;
    reports.set(name, report);
    return report;
  };
  /** Runs the upload until `action`'s `nth` request was applied, then SIGKILLs it (its answer still held). */
  const killed = async (
    manifest: string,
    action: "StartSnapshot" | "PutSnapshotBlock" | "CompleteSnapshot",
    nth: number,
    more: string[],
  ) => {
    const applied = backend.hold(action, nth);
    const child = upload(manifest, more);
    await Promise.race([applied, child.then(() => Promise.reject(new Error(`the upload ended before ${action}`)))]);
    child.kill("SIGKILL");
    const run = await child;
    backend.release();
    t.equal(run.signal, "SIGKILL", `killed once its ${action} #${nth} was applied`);
    return parseManifest(manifest, await readManifestJson(join(dir, manifest)));
  };

  const full = await step("full", "gen1.json");
  t.equal(full.put, (await scanImage(image, EBS_BLOCK_BYTES)).blocks.size, "full: every block holding data put");
  await holdsImage(t, client, full.snapshotId, image);

  await writeBlocks(image, { [layer[1]!]: randomBlock(), [layer[3]!]: null, [spare[2]!]: randomBlock() });
  const incremental = await step("incremental", "gen2.json", {
    parentManifest: join(dir, "gen1.json"),
    verifyAll: true,
  });
  t.match(incremental, { put: 3, zeros: 1, parentHashes: "manifest" }, "incremental: the 3 changed blocks put");
  await holdsImage(t, client, incremental.snapshotId, image);

  // A SIGKILL among the puts: the rerun resumes the same snapshot (its ClientToken).
  await writeBlocks(image, Object.fromEntries(spare.slice(3, 9).map((i) => [i, randomBlock()])));
  const left = await killed("gen3.json", "PutSnapshotBlock", 3, ["--parent", join(dir, "gen2.json")]);
  t.equal(left.status, "uploading", "killed among the puts: the manifest says uploading");
  const resumed = await step("resumed", "gen3.json", { parentManifest: join(dir, "gen2.json") });
  t.equal(resumed.snapshotId, left.snapshotId, "the rerun writes the snapshot the killed run started");
  t.equal(resumed.put + resumed.resumed, 6, "every block the generation changed is put once, or resumed");
  await holdsImage(t, client, resumed.snapshotId, image);

  // A SIGKILL once CompleteSnapshot was applied, before the manifest says so: the rerun finds the
  // snapshot completed, reads it back and records it; nothing is put, nothing stuck.
  await writeBlocks(image, { [spare[10]!]: randomBlock(), [layer[5]!]: randomBlock() });
  const completing = await killed("gen4.json", "CompleteSnapshot", 1, ["--parent", join(dir, "gen3.json")]);
  t.equal(completing.status, "uploading", "killed at the completion: the manifest does not say completed");
  // EC2 lists it with the pool's tags (moto's EC2 as completed from the start), and with
  // ebs-cache:unverified: the pool's readers pass it over, the previous generation stays current.
  const listed = await poolSnapshots(sdk)();
  t.match(
    listed.find((x) => x.snapshotId === completing.snapshotId)?.tags,
    { [SnapshotTag.unverified]: "true", [VolumeTag.pool]: "sim4life" },
    "EC2 lists the killed run's snapshot, tagged unverified",
  );
  t.equal(currentSnapshot(listed)?.snapshotId, resumed.snapshotId, "… and the pool's current one is still gen3's");
  const reconciled = await step("reconciled", "gen4.json", { parentManifest: join(dir, "gen3.json") });
  t.match(
    reconciled,
    { snapshotId: completing.snapshotId, status: "completed", reconciled: true, put: 0 },
    "the rerun finds the snapshot completed, checks it and records it, putting nothing",
  );
  const gen4 = parseManifest("gen4.json", await readManifestJson(join(dir, "gen4.json")));
  t.equal(gen4.status, "completed", "… its manifest completed: the next generation's parent");
  await holdsImage(t, client, reconciled.snapshotId, image);
  t.equal(
    currentSnapshot(await poolSnapshots(sdk)())?.snapshotId,
    reconciled.snapshotId,
    "read back by the rerun and untagged: now the pool's current one",
  );

  // A SIGKILL once StartSnapshot was applied, its answer not yet given: the manifest was written
  // (`starting`, the ClientToken) before the request, so the rerun asks the same token and writes
  // the snapshot the killed run started: one snapshot for the generation, none left pending
  // beside it. (moto keeps no ClientToken: there the adapter's client-token fix is what answers.)
  await writeBlocks(image, { [spare[12]!]: randomBlock() });
  const earlier = new Set((await poolSnapshots(sdk)()).map((x) => x.snapshotId));
  const made = async () => (await poolSnapshots(sdk)()).filter((x) => !earlier.has(x.snapshotId));
  const starting = await killed("gen5.json", "StartSnapshot", 1, ["--parent", join(dir, "gen4.json")]);
  t.match(starting, { status: "starting", written: {} }, "killed at the start: the manifest says starting");
  t.equal(starting.snapshotId, undefined, "… and names no snapshot");
  const nameless = await made();
  t.equal(nameless.length, 1, "EBS made one snapshot, which no manifest names yet");
  t.match(nameless[0]?.tags, { [SnapshotTag.unverified]: "true" }, "… tagged unverified");
  const started = await step("started", "gen5.json", { parentManifest: join(dir, "gen4.json") });
  t.match(
    started,
    { snapshotId: nameless[0]?.snapshotId, status: "completed", resumed: 0 },
    "the rerun writes that one",
  );
  t.same(
    (await made()).map((x) => x.snapshotId),
    [started.snapshotId],
    "one snapshot for the generation in all, as EC2 lists them",
  );
  t.match(
    parseManifest("gen5.json", await readManifestJson(join(dir, "gen5.json"))),
    { status: "completed", snapshotId: started.snapshotId, clientToken: starting.clientToken },
    "its manifest completed, with the token recorded before the start",
  );
  await holdsImage(t, client, started.snapshotId, image);

  return reports;
}

const runs = new Map<string, Map<string, Report>>();
for (const backend of backends) {
  await t.test(`the scenario against ${backend.name}`, async (t) => {
    runs.set(backend.name, await scenario(t, backend));
  });
}

t.test("the emulator and moto: the same reports, step by step", async (t) => {
  const emulator = runs.get("emulator");
  const motoRun = runs.get("moto");
  t.ok(emulator && motoRun, "both ran");
  for (const [name, report] of emulator ?? [])
    t.same(motoRun?.get(name) && normal(motoRun.get(name)!), normal(report), name);
});

t.test("moto as it is: every deviation the adapter names is still there", async (t) => {
  const backend = backends.find((b) => b.name === "moto")!;
  backend.setFixes([]);
  t.teardown(() => backend.setFixes(MOTO_DEVIATIONS));
  const client = testEbsClient(t, backend.endpoint, 1);
  const start = (token: string) =>
    client.send(new StartSnapshotCommand({ VolumeSize: 1, ClientToken: token, Timeout: 60 }));
  const first = await start("twice-token");
  t.equal(first.BlockSize, 512, "block-size: StartSnapshot answers BlockSize 512");
  t.not((await start("twice-token")).SnapshotId, first.SnapshotId, "client-token: the same token, a new snapshot");
  const data = randomBlock();
  await t.resolves(
    client.send(
      new PutSnapshotBlockCommand({
        ...{ SnapshotId: first.SnapshotId, BlockIndex: 3, BlockData: data, DataLength: data.length },
        ...{ Checksum: createHash("sha256").update(randomBlock()).digest("base64"), ChecksumAlgorithm: "SHA256" },
      }),
    ),
    "checksums: a put whose checksum is another block's is taken",
  );
  const listed = await client.send(new ListSnapshotBlocksCommand({ SnapshotId: first.SnapshotId }));
  t.equal(typeof listed.Blocks?.[0]?.BlockIndex, "string", "string-index: ListSnapshotBlocks' BlockIndex a string");
  const child = await client.send(
    new StartSnapshotCommand({ VolumeSize: 1, ParentSnapshotId: "snap-0123456789abcdef0", Timeout: 60 }),
  );
  t.ok(child.SnapshotId, "parent: an unknown ParentSnapshotId is taken");
});

t.test("moto as it is reaches the product: refused, never a snapshot with wrong content", async (t) => {
  const backend = backends.find((b) => b.name === "moto")!;
  const dir = await mkdtemp(join(tmpdir(), "upload-twice-raw-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const image = join(dir, "set.img");
  await makePoolImage(image);
  const client = testEbsClient(t, backend.endpoint, 1);
  const parent = await runSnapshotUpload(uploadDeps(client), uploadSettings(image, join(dir, "parent.json")));

  // The string BlockIndex alone: the parent's blocks would be keyed "5" beside the image's 5.
  backend.setFixes(MOTO_DEVIATIONS.filter((d) => d !== "string-index"));
  t.teardown(() => backend.setFixes(MOTO_DEVIATIONS));
  const started = backend.count("StartSnapshot");
  await t.rejects(
    runSnapshotUpload(uploadDeps(client), {
      ...uploadSettings(image, join(dir, "child.json")),
      parentSnapshotId: parent.snapshotId,
    }),
    { constructor: EbsAnswerError, message: /ListSnapshotBlocks .* answered a BlockIndex of "\d+" \(string\)/ },
    "a string BlockIndex is refused where it is read",
  );
  t.equal(backend.count("StartSnapshot"), started, "… before any snapshot was started");

  // Its block size: refused at the start, before any put.
  backend.setFixes(MOTO_DEVIATIONS.filter((d) => d !== "block-size"));
  const puts = backend.count("PutSnapshotBlock");
  await t.rejects(
    runSnapshotUpload(uploadDeps(client), uploadSettings(image, join(dir, "other.json"))),
    { constructor: EbsAnswerError, message: /StartSnapshot .* answered a BlockSize of 512/ },
    "a block size of 512 is refused",
  );
  t.equal(backend.count("PutSnapshotBlock"), puts, "… and nothing was put");
});
