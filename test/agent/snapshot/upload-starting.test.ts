/**
 * `snapshot upload` records its ClientToken (`starting`) before StartSnapshot is asked, against
 * the lab's EBS direct emulator with the real SDK: a run stopped before its request reached EBS,
 * or after EBS made the snapshot but before its answer was recorded, leaves a manifest naming the
 * token, and the rerun asks it again: one snapshot in all, never a second beside a nameless first.
 * Then what a `starting` manifest meets: its token's snapshot in error or completed by now (the
 * abandon and reconcile paths), the token forgotten by EBS, a full disk at either write, another
 * parent, size or image (refused as before), and a rejected manifest's fresh token recorded first.
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t, { type Test } from "tap";
import { parseManifest, type SnapshotManifest } from "../../../src/agent/snapshot/manifest.ts";
import { runSnapshotUpload } from "../../../src/agent/snapshot/run.ts";
import type { SnapshotBlockWriter } from "../../../src/agent/ports.ts";
import { snapshotBlockWriter } from "../../../src/aws/ebs.ts";
import { readManifestJson, writeManifestJson } from "../../../src/host/snapshot-manifest.ts";
import { SnapshotTag } from "../../../src/tags.ts";
import { makePoolImage, randomBlock, writeBlocks, blocksInside } from "../../fixtures/builders/pool-image.ts";
import { poolSnapshots, testEbsClient, uploadDeps, uploadSettings } from "../../fixtures/lab/snapshot-upload.ts";
import { startLab, type Lab } from "../../lab/ec2/helpers.ts";
import { currentSnapshot } from "../../../src/agent/volume-rules.ts";

type StartRequest = Parameters<SnapshotBlockWriter["start"]>[0];

async function setup(t: Test, lab: Lab) {
  const dir = await mkdtemp(join(tmpdir(), "upload-starting-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const image = join(dir, "set.img");
  await makePoolImage(image);
  const client = testEbsClient(t, lab.emu.endpoint, 1);
  const manifest = join(dir, "gen.json");
  const read = async (): Promise<SnapshotManifest> => parseManifest(manifest, await readManifestJson(manifest));
  const snapshots = () => lab.emu.snapshotState().snapshots;
  const base = snapshotBlockWriter(client);
  /** What the manifest on disk said each time StartSnapshot was asked, with the token asked. */
  const asked: { token: string; manifest: SnapshotManifest }[] = [];
  /**
   * The writer, with a stop around StartSnapshot: `before` fails the call before its request
   * leaves (a kill before it reached EBS), `after` once EBS made the snapshot (its answer lost,
   * then a kill); `forget` asks EBS with a token it never saw (EBS's memory of the token expired).
   */
  const writer = (stop?: "before" | "after", forget = false): SnapshotBlockWriter => ({
    ...base,
    async start(request: StartRequest) {
      asked.push({ token: request.clientToken, manifest: await read() });
      if (stop === "before") throw new Error("killed before StartSnapshot's request left");
      const answer = await base.start(forget ? { ...request, clientToken: `${request.clientToken}-x` } : request);
      if (stop === "after") throw new Error("killed once StartSnapshot was applied, its answer lost");
      return answer;
    },
  });
  return { dir, image, client, manifest, read, snapshots, asked, writer };
}

t.test("killed before StartSnapshot's request reached EBS: the rerun starts with the recorded token", async (t) => {
  const lab = await startLab(t);
  const { image, client, manifest, read, snapshots, asked, writer } = await setup(t, lab);
  await t.rejects(
    runSnapshotUpload(uploadDeps(client, { writer: writer("before") }), uploadSettings(image, manifest)),
    {
      message: /killed before/,
    },
  );
  const left = await read();
  t.match(left, { status: "starting", written: {} }, "the manifest says starting, nothing written");
  t.equal(left.snapshotId, undefined, "… and names no snapshot");
  t.same(asked[0], { token: left.clientToken, manifest: left }, "it was written before StartSnapshot was asked");
  t.same(Object.keys(snapshots()), [], "no snapshot was made");

  const lines: string[] = [];
  const rerun = await runSnapshotUpload(
    uploadDeps(client, { lines, writer: writer() }),
    uploadSettings(image, manifest),
  );
  t.equal(asked[1]?.token, left.clientToken, "the rerun asks StartSnapshot with the recorded token");
  t.match(rerun, { status: "completed", resumed: 0, abandoned: [] }, "and uploads from the first block");
  t.same(Object.keys(snapshots()), [rerun.snapshotId], "one snapshot in all");
  t.match(await read(), { status: "completed", snapshotId: rerun.snapshotId, clientToken: left.clientToken });
  t.ok(
    lines.some((l) => l.includes("snapshot.start-recorded")),
    "the rerun says it asked the recorded token",
  );
});

t.test("killed once EBS made the snapshot, before the manifest named it: the rerun writes that one", async (t) => {
  const lab = await startLab(t);
  const { image, client, manifest, read, snapshots, writer } = await setup(t, lab);
  await t.rejects(runSnapshotUpload(uploadDeps(client, { writer: writer("after") }), uploadSettings(image, manifest)), {
    message: /killed once/,
  });
  t.match(await read(), { status: "starting" }, "the manifest says starting");
  const made = Object.entries(snapshots());
  t.equal(made.length, 1, "EBS made one snapshot");
  t.match(made[0]?.[1], { state: "pending", tags: { [SnapshotTag.unverified]: "true" } }, "pending, unverified");
  t.equal(currentSnapshot(await poolSnapshots(client)()), undefined, "nobody's current snapshot");

  const rerun = await runSnapshotUpload(uploadDeps(client), uploadSettings(image, manifest));
  t.equal(rerun.snapshotId, made[0]?.[0], "the rerun writes the snapshot the killed run started");
  t.same(Object.keys(snapshots()), [rerun.snapshotId], "one snapshot in all, none left pending");
  t.match(rerun, { status: "completed", resumed: 0, abandoned: [] });
  t.equal(currentSnapshot(await poolSnapshots(client)())?.snapshotId, rerun.snapshotId, "read back: now current");
});

t.test("a starting manifest's snapshot failed by EBS meanwhile: abandoned, a new token recorded first", async (t) => {
  let now = Date.parse("2026-12-02T10:00:00Z");
  const lab = await startLab(t, { clock: () => now });
  const { image, client, manifest, read, snapshots, asked, writer } = await setup(t, lab);
  const settings = { ...uploadSettings(image, manifest), timeoutMinutes: 10 };
  await t.rejects(runSnapshotUpload(uploadDeps(client, { writer: writer("after") }), settings));
  const left = await read();
  const [first] = Object.keys(snapshots());
  now += 11 * 60_000; // past its Timeout with no put: EBS fails it
  const rerun = await runSnapshotUpload(uploadDeps(client, { writer: writer() }), settings);
  t.same(rerun.abandoned, [first], "the failed one abandoned, named");
  t.equal(asked[1]?.token, left.clientToken, "the recorded token asked first");
  t.not(asked[2]?.token, left.clientToken, "then a new one…");
  t.match(asked[2]?.manifest, { status: "starting", clientToken: asked[2]?.token }, "… recorded before it is asked");
  t.same(Object.keys(snapshots()), [rerun.snapshotId], "the failed one deleted: one snapshot in all");
  t.match(await read(), { status: "completed", snapshotId: rerun.snapshotId });
});

t.test("a starting manifest's snapshot completed by now without the image: checked, abandoned", async (t) => {
  const lab = await startLab(t);
  const { image, client, manifest, read, snapshots, writer } = await setup(t, lab);
  await t.rejects(runSnapshotUpload(uploadDeps(client, { writer: writer("after") }), uploadSettings(image, manifest)));
  const [first] = Object.keys(snapshots());
  // Completed with nothing put (by hand, or by another run given the same manifest).
  await snapshotBlockWriter(client).complete(first!, 0, "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=");
  const lines: string[] = [];
  const rerun = await runSnapshotUpload(uploadDeps(client, { lines }), uploadSettings(image, manifest));
  t.same(rerun.abandoned, [first], "read back, found without the image, abandoned");
  t.ok(
    lines.some((l) => l.includes("snapshot.abandoned") && l.includes("does not hold the image")),
    "the rerun says why",
  );
  t.same(Object.keys(snapshots()), [rerun.snapshotId], "deleted: one snapshot in all");
  t.match(await read(), { status: "completed", snapshotId: rerun.snapshotId });
});

t.test("a starting manifest whose token EBS forgot: a new snapshot, the first left unverified", async (t) => {
  const lab = await startLab(t);
  const { image, client, manifest, snapshots, writer } = await setup(t, lab);
  await t.rejects(runSnapshotUpload(uploadDeps(client, { writer: writer("after") }), uploadSettings(image, manifest)));
  const [first] = Object.keys(snapshots());
  const rerun = await runSnapshotUpload(uploadDeps(client, { writer: writer(undefined, true) }), {
    ...uploadSettings(image, manifest),
  });
  t.not(rerun.snapshotId, first, "EBS gives a new snapshot for a token it no longer knows");
  t.equal(rerun.status, "completed");
  // Nothing names the first (the limit of a token's memory, as for an uploading manifest's):
  // it keeps its tag, so no reader of the pool takes it, and EBS fails it after its Timeout.
  t.match(snapshots()[first!], { state: "pending", tags: { [SnapshotTag.unverified]: "true" } });
  t.equal(currentSnapshot(await poolSnapshots(client)())?.snapshotId, rerun.snapshotId, "the rerun's is current");
});

t.test("a full disk: at the starting write nothing is started; after it, the rerun resumes", async (t) => {
  const lab = await startLab(t);
  const { dir, image, client, snapshots } = await setup(t, lab);
  const manifest = join(dir, "gone", "g.json");
  const error = await runSnapshotUpload(uploadDeps(client), uploadSettings(image, manifest)).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.match(error, {
    name: "SnapshotUploadError",
    message: /^the manifest .*g\.json cannot be written: .*ENOENT/,
    remediation: /^nothing was started: make its folder writable/,
  });
  t.same(Object.keys(snapshots()), [], "nothing started");

  // The starting write lands, the next (the snapshot's first record) does not.
  await mkdir(join(dir, "gone"));
  let writes = 0;
  const full = {
    ...uploadDeps(client),
    writeManifestJson: async (path: string, m: SnapshotManifest) => {
      if (++writes === 2) throw new Error("ENOSPC: no space left on device");
      await writeManifestJson(path, m);
    },
  };
  await t.rejects(runSnapshotUpload(full, uploadSettings(image, manifest)), { message: /ENOSPC/ });
  t.match(parseManifest(manifest, await readManifestJson(manifest)), { status: "starting" });
  const [first] = Object.keys(snapshots());
  t.ok(first, "the snapshot started, the manifest still starting");
  const rerun = await runSnapshotUpload(uploadDeps(client), uploadSettings(image, manifest));
  t.equal(rerun.snapshotId, first, "the rerun writes it (never deleted, never a second)");
  t.same(Object.keys(snapshots()), [first]);
});

t.test("a starting manifest of another parent, size or image: refused as before, nothing started", async (t) => {
  const lab = await startLab(t);
  const { dir, image, client, manifest, read, snapshots, writer } = await setup(t, lab);
  const parent = await runSnapshotUpload(uploadDeps(client), uploadSettings(image, join(dir, "parent.json")));
  await t.rejects(runSnapshotUpload(uploadDeps(client, { writer: writer("before") }), uploadSettings(image, manifest)));
  const left = await read();
  t.equal(left.status, "starting");
  const refused = async (name: string, more: object, says: RegExp) => {
    const before = Object.keys(snapshots());
    await t.rejects(
      runSnapshotUpload(uploadDeps(client), { ...uploadSettings(image, manifest), ...more }),
      { name: "SnapshotUploadError", message: says, exitCode: 2 },
      name,
    );
    t.same(Object.keys(snapshots()), before, `${name}: nothing started`);
    t.same(await read(), left, `${name}: the manifest as it was`);
  };
  await refused(
    "another parent",
    { parentManifest: join(dir, "parent.json") },
    new RegExp(`resumes an upload with parent none, not ${parent.snapshotId}`),
  );
  await refused("another size", { volumeSizeGiB: 2 }, /resumes an upload of 1 GiB, not 2 GiB/);
  const [block] = await blocksInside(image, "/docker/layer");
  await writeBlocks(image, { [block!]: randomBlock() });
  await refused("another image", {}, /changed since the upload of this build began/);
});

t.test("a rejected manifest: its fresh token recorded (starting) before it is asked", async (t) => {
  const lab = await startLab(t);
  const { image, client, manifest, read, snapshots, asked, writer } = await setup(t, lab);
  const done = await runSnapshotUpload(uploadDeps(client), uploadSettings(image, manifest));
  const completed = await read();
  // As a read-back that found it wrong leaves it (upload-reconcile.test.ts makes one for real).
  await writeManifestJson(manifest, { ...completed, status: "rejected" } as SnapshotManifest);
  await t.rejects(runSnapshotUpload(uploadDeps(client, { writer: writer("after") }), uploadSettings(image, manifest)));
  t.not(asked[0]?.token, completed.clientToken, "the rejected token is never asked");
  t.match(asked[0]?.manifest, { status: "starting", clientToken: asked[0]?.token }, "the new one recorded first");
  const rerun = await runSnapshotUpload(uploadDeps(client), uploadSettings(image, manifest));
  t.not(rerun.snapshotId, done.snapshotId);
  t.same(Object.keys(snapshots()), [rerun.snapshotId], "the rejected one deleted, no second new one");
});
