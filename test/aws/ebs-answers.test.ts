/**
 * What the EBS direct adapter takes from an answer (src/aws/ebs-answers.ts) and how it types a
 * failure (src/aws/ebs-errors.ts), pure: answers as a server that drifts from the API would give
 * them (a string index, a repeated or descending one, one past the size, another block size, a
 * page token again, bytes that are not the checksum's), each refused by name; the SDK's errors
 * by code and status into the table's kinds, with whether a rerun resumes.
 */
import { createHash } from "node:crypto";
import t from "tap";
import {
  EBS_BLOCK_BYTES,
  checkBlock,
  checkCompleted,
  checkListPage,
  checkPut,
  checkStarted,
  newListState,
} from "../../src/aws/ebs-answers.ts";
import { EBS_FAULTS, EbsAnswerError, EbsCallError, classifyEbsError, ebsCallError } from "../../src/aws/ebs-errors.ts";
import { AgentError } from "../../src/errors.ts";

const SNAP = "snap-0123456789abcdef0";

t.test("StartSnapshot: an id, 512 KiB blocks, the size asked, a status of the model", async (t) => {
  const good = { SnapshotId: SNAP, BlockSize: EBS_BLOCK_BYTES, Status: "pending", VolumeSize: 2 };
  t.same(checkStarted(good, { volumeSizeGiB: 2 }), { snapshotId: SNAP, status: "pending" });
  t.throws(() => checkStarted({ ...good, BlockSize: 512 }, { volumeSizeGiB: 2 }), {
    name: "EbsAnswerError",
    message: /StartSnapshot \(snap-0123456789abcdef0\) answered a BlockSize of 512 \(EBS direct's is 524288\)/,
  });
  t.throws(() => checkStarted({ ...good, SnapshotId: "vol-1" }, { volumeSizeGiB: 2 }), EbsAnswerError);
  t.throws(() => checkStarted({ ...good, Status: "done" }, { volumeSizeGiB: 2 }), /Status of "done"/);
  t.throws(() => checkStarted({ ...good, VolumeSize: 1 }, { volumeSizeGiB: 2 }), /VolumeSize of 1 for the 2 GiB/);
});

t.test(
  "PutSnapshotBlock and CompleteSnapshot: the checksum echoed is the one sent; a status of the model",
  async (t) => {
    t.doesNotThrow(() => checkPut({ Checksum: "abc", ChecksumAlgorithm: "SHA256" }, SNAP, 3, "abc"));
    t.doesNotThrow(() => checkPut({}, SNAP, 3, "abc"), "an answer without the echo");
    t.throws(() => checkPut({ Checksum: "xyz" }, SNAP, 3, "abc"), /the checksum "xyz" for block 3, put with abc/);
    t.equal(checkCompleted({ Status: "completed" }, SNAP), "completed");
    t.throws(() => checkCompleted({}, SNAP), /Status of undefined/);
  },
);

t.test("ListSnapshotBlocks: whole indices within the size, unique and ascending across pages", async (t) => {
  const page = (blocks: unknown[], more: Record<string, unknown> = {}) => ({
    Blocks: blocks,
    VolumeSize: 1,
    BlockSize: EBS_BLOCK_BYTES,
    ...more,
  });
  const state = newListState();
  t.equal(
    checkListPage(page([{ BlockIndex: 0, BlockToken: "a" }], { NextToken: "n1" }), SNAP, state),
    "n1",
    "the next page's token",
  );
  t.equal(checkListPage(page([{ BlockIndex: 5, BlockToken: "b" }]), SNAP, state), undefined);
  t.same(
    [...state.blocks],
    [
      [0, "a"],
      [5, "b"],
    ],
  );
  const refused = (blocks: unknown[], pattern: RegExp, name: string, more: Record<string, unknown> = {}) =>
    t.throws(
      () => checkListPage(page(blocks, more), SNAP, newListState()),
      { name: "EbsAnswerError", message: pattern },
      name,
    );
  refused([{ BlockIndex: "5", BlockToken: "a" }], /a BlockIndex of "5" \(string\)/, "a string index (moto's)");
  refused([{ BlockIndex: 2048, BlockToken: "a" }], /a BlockIndex of 2048 .* 0 to 2047/, "an index past the size");
  refused([{ BlockIndex: -1, BlockToken: "a" }], /a BlockIndex of -1/, "a negative index");
  refused([{ BlockIndex: 1.5, BlockToken: "a" }], /a BlockIndex of 1.5/, "a fraction");
  refused(
    [
      { BlockIndex: 3, BlockToken: "a" },
      { BlockIndex: 3, BlockToken: "b" },
    ],
    /block 3 after block 3/,
    "an index twice",
  );
  refused(
    [
      { BlockIndex: 4, BlockToken: "a" },
      { BlockIndex: 2, BlockToken: "b" },
    ],
    /block 2 after block 4/,
    "descending",
  );
  refused([{ BlockIndex: 1 }], /block 1 without a BlockToken/, "no token");
  refused([], /BlockSize of 512/, "another block size", { BlockSize: 512 });
  refused([], /VolumeSize of "1"/, "a size as a string", { VolumeSize: "1" });
  const again = newListState();
  checkListPage(page([], { NextToken: "same" }), SNAP, again);
  t.throws(() => checkListPage(page([], { NextToken: "same" }), SNAP, again), /the NextToken "same" again/);
  const resized = newListState();
  checkListPage(page([], { NextToken: "n" }), SNAP, resized);
  t.throws(() => checkListPage(page([], { VolumeSize: 2 }), SNAP, resized), /VolumeSize of 2 GiB after 1 GiB/);
});

t.test("GetSnapshotBlock: 512 KiB whose SHA-256 is the checksum EBS sent with them", async (t) => {
  const data = Buffer.alloc(EBS_BLOCK_BYTES, 7);
  const hash = createHash("sha256").update(data).digest("base64");
  t.equal(
    checkBlock({ DataLength: EBS_BLOCK_BYTES, Checksum: hash, ChecksumAlgorithm: "SHA256" }, data, SNAP, 4),
    hash,
  );
  t.equal(checkBlock({}, data, SNAP, 4), hash, "hashed here when EBS sends no checksum");
  t.throws(
    () => checkBlock({ Checksum: "AAAA", ChecksumAlgorithm: "SHA256" }, data, SNAP, 4),
    /block 4 with the checksum "AAAA", but bytes whose SHA-256 is/,
  );
  t.throws(() => checkBlock({}, data.subarray(1), SNAP, 4), /524287 bytes for block 4/);
  t.throws(() => checkBlock({ DataLength: 512 }, data, SNAP, 4), /DataLength of 512/);
});

t.test("the SDK's failures, typed by the table: kind, whether a rerun resumes, no bug report", async (t) => {
  const sdkError = (name: string, status?: number, extra: Record<string, unknown> = {}) =>
    Object.assign(new Error(`${name} happened`), {
      name,
      ...(status !== undefined ? { $metadata: { httpStatusCode: status } } : {}),
      ...extra,
    });
  const cases: [Error, string, boolean][] = [
    [sdkError("ResourceNotFoundException", 404, { Reason: "SNAPSHOT_NOT_FOUND" }), "not-found", false],
    [sdkError("ConflictException", 409), "conflict", false],
    [sdkError("ValidationException", 400, { Reason: "INVALID_BLOCK" }), "invalid-request", false],
    [sdkError("AccessDeniedException", 403, { Reason: "DEPENDENCY_ACCESS_DENIED" }), "unauthorized", true],
    [sdkError("RequestThrottledException", 400), "throttled", true],
    [sdkError("ConcurrentLimitExceededException", 400), "throttled", true],
    [sdkError("ServiceQuotaExceededException", 402), "quota", true],
    [sdkError("InternalServerException", 500), "server", true],
    // moto's HTML error page: the SDK's JSON parser fails on it, the status is kept.
    [sdkError("SyntaxError", 500), "server", true],
    [sdkError("CredentialsProviderError"), "credentials-unavailable", true],
    [Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }), "network", true],
  ];
  for (const [error, kind, resumes] of cases) {
    const typed = ebsCallError("PutSnapshotBlock", SNAP, error);
    t.ok(typed instanceof EbsCallError, `${error.name}: an EbsCallError`);
    t.match(typed, { kind, resumes, exitCode: 1 }, `${error.name}: ${kind}`);
    t.notMatch(typed.remediation, /report (this|it) as a bug/, `${error.name}: not the agent's bug`);
    t.match(typed.message, /EBS PutSnapshotBlock \(snap-0123456789abcdef0\) failed/);
  }
  t.equal(
    classifyEbsError(sdkError("ValidationException", 400, { Reason: "INVALID_CUSTOMER_KEY" })).reason,
    "INVALID_CUSTOMER_KEY",
  );
  t.match(ebsCallError("StartSnapshot", SNAP, sdkError("ResourceNotFoundException", 404)).remediation, /--parent/);
  t.match(ebsCallError("StartSnapshot", SNAP, sdkError("ConflictException", 409)).remediation, /--built-at/);
  const own = new AgentError("ours", "do this");
  t.equal(ebsCallError("StartSnapshot", SNAP, own), own, "the agent's own typed errors pass through");
  t.same(Object.keys(EBS_FAULTS).sort(), [...new Set(cases.map(([, kind]) => kind))].sort(), "every kind has a row");
});
