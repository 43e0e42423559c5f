/**
 * Every failure of `snapshot upload` that is not the agent's own is told as what it is: typed
 * (the call, the snapshot, the AWS code, whether a rerun resumes, a remediation, an exit code),
 * never the top-level handler's "unexpected failure … report this as a bug". Against the lab's
 * EBS direct emulator with its faults (500s and throttling past the SDK's retries), an unknown
 * parent, a resume whose ClientToken comes with other tags, a missing image, an option of the
 * wrong shape; each as src/fatal.ts prints it, and each changing nothing it should not.
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t, { type Test } from "tap";
import { parseManifest } from "../../../src/agent/snapshot/manifest.ts";
import { runSnapshotUpload } from "../../../src/agent/snapshot/run.ts";
import { snapshotBlockWriter } from "../../../src/aws/ebs.ts";
import { ExitCode } from "../../../src/errors.ts";
import { reportFatal } from "../../../src/fatal.ts";
import { readManifestJson } from "../../../src/host/snapshot-manifest.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { makePoolImage } from "../../fixtures/builders/pool-image.ts";
import { generationTagsFor, testEbsClient, uploadDeps, uploadSettings } from "../../fixtures/lab/snapshot-upload.ts";
import { startLab } from "../../lab/ec2/helpers.ts";

/** What the CLI's handler prints for `error` and the exit code it gives: never a bug report. */
function fatal(t: Test, error: unknown, exitCode: number, says: RegExp) {
  const log = createMemoryLogger();
  const code = reportFatal(error, log, { failed: "agent.failed", stack: "agent.stack", untypedIsBug: true });
  const printed = log.lines.join("\n");
  t.notMatch(printed, /unexpected failure|report this as a bug/, "not reported as the agent's bug");
  t.match(printed, says, "says what failed");
  t.equal(code, exitCode, `exit ${exitCode}`);
}

const rejection = async (promise: Promise<unknown>): Promise<unknown> =>
  promise.then(
    () => new Error("it did not fail"),
    (error: unknown) => error,
  );

t.test("each failure typed, printed as itself", async (t) => {
  const lab = await startLab(t);
  const dir = await mkdtemp(join(tmpdir(), "upload-errors-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const image = join(dir, "set.img");
  await makePoolImage(image);
  // Two attempts a call: the faults below outlast the SDK's retries at once.
  const client = testEbsClient(t, lab.emu.endpoint, 2);
  const snapshots = () => Object.keys(lab.emu.snapshotState().snapshots).length;

  await t.test("a 500 on every put, past the retries: server, the rerun resumes", async (t) => {
    lab.emu.setFaults({ actions: { PutSnapshotBlock: { applyThen500: true } } });
    t.teardown(() => lab.emu.setFaults({}));
    const error = await rejection(runSnapshotUpload(uploadDeps(client), uploadSettings(image, join(dir, "a.json"))));
    t.match(error, { name: "EbsCallError", call: "PutSnapshotBlock", code: "InternalServerException" });
    t.match(error, { kind: "server", resumes: true, remediation: /resumes from the manifest/ });
    fatal(t, error, ExitCode.failure, /EBS PutSnapshotBlock \(snap-[0-9a-f]+\) failed: InternalServerException/);
    lab.emu.setFaults({});
    const resumed = await runSnapshotUpload(uploadDeps(client), uploadSettings(image, join(dir, "a.json")));
    t.equal(resumed.status, "completed", "once EBS answers again, the same command completes it");
  });

  await t.test("throttling that outlasts the retries: throttled, the rerun resumes", async (t) => {
    lab.emu.setFaults({ actions: { StartSnapshot: { throttleRate: 1 } } });
    t.teardown(() => lab.emu.setFaults({}));
    const before = snapshots();
    const error = await rejection(runSnapshotUpload(uploadDeps(client), uploadSettings(image, join(dir, "b.json"))));
    t.match(error, { name: "EbsCallError", code: "RequestThrottledException", kind: "throttled", resumes: true });
    fatal(t, error, ExitCode.failure, /--concurrency/);
    t.equal(snapshots(), before, "no snapshot was started");
  });

  await t.test("an unknown --parent-snapshot: not found, named", async (t) => {
    const error = await rejection(
      runSnapshotUpload(uploadDeps(client), {
        ...uploadSettings(image, join(dir, "c.json")),
        parentSnapshotId: "snap-0123456789abcdef0",
      }),
    );
    t.match(error, { name: "EbsCallError", call: "ListSnapshotBlocks", kind: "not-found", resumes: false });
    fatal(t, error, ExitCode.failure, /snap-0123456789abcdef0.*ResourceNotFoundException/s);
  });

  await t.test("a resume whose ClientToken comes with other tags: a conflict, with what to give", async (t) => {
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
        ...uploadSettings(image, join(dir, "d.json")),
        concurrency: 1,
      }),
      { name: "SnapshotUploadError" },
    );
    const error = await rejection(
      runSnapshotUpload(uploadDeps(client), {
        ...uploadSettings(image, join(dir, "d.json")),
        tags: generationTagsFor("2027-01-01T00:00:00Z"),
      }),
    );
    t.match(error, { name: "EbsCallError", call: "StartSnapshot", kind: "conflict", resumes: false });
    fatal(t, error, ExitCode.failure, /ConflictException.*--built-at/s);
    const left = parseManifest("d.json", await readManifestJson(join(dir, "d.json")));
    t.equal(left.status, "uploading", "the manifest is left for a rerun with the same options");
  });

  await t.test("the first manifest write fails: nothing is started, the rerun uploads", async (t) => {
    // The manifest's folder is gone (as a full or read-only one, the write is refused): the
    // manifest records the ClientToken before StartSnapshot is asked, so nothing is started.
    const manifest = join(dir, "gone", "g.json");
    const before = new Set(Object.keys(lab.emu.snapshotState().snapshots));
    const error = await rejection(runSnapshotUpload(uploadDeps(client), uploadSettings(image, manifest)));
    t.match(error, { name: "SnapshotUploadError", message: /^the manifest .*g\.json cannot be written: .*ENOENT/ });
    t.match(error, { remediation: /^nothing was started: make its folder writable/ });
    fatal(t, error, ExitCode.failure, /cannot be written/);
    const started = Object.keys(lab.emu.snapshotState().snapshots).filter((id) => !before.has(id));
    t.same(started, [], "no snapshot started");

    await mkdir(join(dir, "gone"));
    const rerun = await runSnapshotUpload(uploadDeps(client), uploadSettings(image, manifest));
    t.equal(rerun.status, "completed", "the rerun uploads");
    t.same(
      Object.keys(lab.emu.snapshotState().snapshots).filter((id) => !before.has(id)),
      [rerun.snapshotId],
      "one snapshot in all: the rerun's",
    );
  });

  await t.test("a missing image, an option of the wrong shape: usage, before any call", async (t) => {
    const before = snapshots();
    const missing = await rejection(
      runSnapshotUpload(uploadDeps(client), uploadSettings(join(dir, "nope.img"), join(dir, "e.json"))),
    );
    t.match(missing, { name: "PoolImageError", message: /nope\.img does not exist/ });
    fatal(t, missing, ExitCode.usage, /does not exist/);
    const volume = await rejection(
      runSnapshotUpload(uploadDeps(client), {
        ...uploadSettings(image, join(dir, "f.json")),
        parentSnapshotId: "vol-0123456789abcdef0",
      }),
    );
    t.match(volume, {
      name: "SnapshotUploadError",
      message: /--parent-snapshot "vol-0123456789abcdef0" is not a snapshot id/,
    });
    fatal(t, volume, ExitCode.usage, /not a snapshot id/);
    t.equal(snapshots(), before, "nothing was started");
  });
});
