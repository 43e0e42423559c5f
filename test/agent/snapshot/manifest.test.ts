/**
 * The build's manifest as read back (src/agent/snapshot/manifest.ts), pure: every status written
 * before `starting` came still read as it was (the same format), a `starting` manifest (the
 * ClientToken recorded before StartSnapshot is asked) read, and one that records what cannot have
 * happened before StartSnapshot answered refused with the problem named.
 */
import { createHash } from "node:crypto";
import t from "tap";
import { MANIFEST_FORMAT, ManifestError, parseManifest } from "../../../src/agent/snapshot/manifest.ts";

const hash = (text: string) => createHash("sha256").update(text).digest("base64");

/** A manifest as the upload wrote it before `starting` existed (its keys in that order). */
const written = (status: string, more: Record<string, unknown> = {}) => ({
  format: "ebs-cache-agent/snapshot-manifest@1",
  snapshotId: "snap-0123456789abcdef0",
  parentSnapshotId: "snap-00000000000000001",
  clientToken: "6f1c3e0a-2b8d-4c57-9a51-0d3f7a2e9b44",
  status,
  volumeSizeGiB: 1,
  blockSize: 524288,
  imageBytes: 1073741824,
  blocks: { "0": hash("a"), "7": hash("b") },
  written: { "0": hash("a") },
  tags: { "ebs-cache:pool": "sim4life" },
  ...more,
});

/** A manifest as the upload writes it before StartSnapshot is asked. */
const starting = (more: Record<string, unknown> = {}) => {
  const { snapshotId: _none, ...rest } = written("starting", { written: {} });
  return { ...rest, ...more };
};

t.test("every manifest written before `starting` is read as it was", async (t) => {
  t.equal(MANIFEST_FORMAT, "ebs-cache-agent/snapshot-manifest@1", "the format those were written with");
  for (const status of ["uploading", "completing", "rejected"]) {
    const read = parseManifest("m.json", written(status));
    t.match(read, { status, snapshotId: "snap-0123456789abcdef0", written: { "0": hash("a") } }, status);
  }
  const completed = written("completed", {
    written: { "0": hash("a"), "7": hash("b") },
    verified: { listed: 2, read: 2, all: true },
  });
  t.same(parseManifest("m.json", completed), completed, "completed, with its read-back check, unchanged");
});

t.test("a starting manifest: a ClientToken, no snapshot, nothing written", async (t) => {
  const read = parseManifest("m.json", starting());
  t.equal(read.status, "starting");
  t.equal(read.snapshotId, undefined, "no snapshot named");
  t.same(read.written, {}, "nothing written");
  t.equal(read.clientToken, "6f1c3e0a-2b8d-4c57-9a51-0d3f7a2e9b44", "the token StartSnapshot is asked with");
  t.equal(read.parentSnapshotId, "snap-00000000000000001", "the parent it is asked with (the rerun compares it)");
});

t.test("a manifest that records what cannot have happened yet is refused, by name", async (t) => {
  const refused = (json: unknown, says: RegExp, name: string) =>
    t.throws(() => parseManifest("m.json", json), { constructor: ManifestError, message: says }, name);
  refused(
    starting({ snapshotId: "snap-0123456789abcdef0" }),
    /^snapshot manifest m\.json: a starting manifest names a snapshotId/,
    "starting, with a snapshot",
  );
  refused(
    starting({ written: { "0": hash("a") } }),
    /a starting manifest records blocks written/,
    "starting, with blocks put",
  );
  refused(
    starting({ verified: { listed: 1, read: 1, all: true } }),
    /a starting manifest records a read-back check/,
    "starting, read back",
  );
  refused(starting({ clientToken: "" }), /clientToken is not a token/, "starting, without a token");
  refused(starting({ status: "started" }), /status is none of starting, uploading/, "a status of no agent's");
  const { snapshotId: _gone, ...nameless } = written("uploading");
  refused(nameless, /snapshotId is not snap-…/, "uploading without its snapshot");
  refused(written("completed", { snapshotId: undefined }), /snapshotId is not snap-…/, "completed without it");
});

t.test("its remediation says what to give", async (t) => {
  let error: unknown;
  try {
    parseManifest("m.json", starting({ snapshotId: "snap-0123456789abcdef0" }));
  } catch (caught) {
    error = caught;
  }
  t.match(
    error,
    { constructor: ManifestError, remediation: /give the manifest this command wrote/, exitCode: 2 },
    "a usage error: nothing is uploaded",
  );
});
