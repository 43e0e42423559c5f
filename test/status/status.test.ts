/**
 * `status --json`: the document built from the agent's records and what is observed now is
 * valid against schema/status.schema.json (ajv) in every state a host can be in, its verdict
 * and exit code say healthy or not, the human view says the same, and the records survive a
 * round trip through the state folder (a corrupt one is a problem, not trusted).
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t, { type Test } from "tap";
import { Ajv } from "ajv";
import { buildStatus, type StatusDocument, type StatusInputs } from "../../src/status/document.ts";
import {
  BOOT_RECORD_FILE,
  readBootRecord,
  readReleaseRecord,
  writeBootRecord,
  writeReleaseRecord,
  type ReleaseRecord,
} from "../../src/status/records.ts";
import { renderStatus, statusExitCode } from "../../src/status/view.ts";
import { observeStatus, type StatusSources } from "../../src/status/observe.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { readyBoot } from "../fixtures/builders/use-case-results.ts";
import {
  cacheFilesystem as fs,
  healthyStatusInputs as healthyInputs,
  prewarmState as prewarm,
  readyBootRecord as boot,
  statusNow as now,
} from "../fixtures/builders/status-inputs.ts";
import type { ReleaseReport } from "../../src/agent/outcomes.ts";

const schema = JSON.parse(
  await readFile(new URL("../../schema/status.schema.json", import.meta.url), "utf8"),
) as object;
const validate = new Ajv({ allErrors: true, strict: true }).compile(schema);

function assertValid(tt: Test, doc: StatusDocument) {
  const ok = validate(JSON.parse(JSON.stringify(doc)));
  tt.ok(ok, `valid against the schema${ok ? "" : `: ${JSON.stringify(validate.errors)}`}`);
}

t.test("a healthy host: everything in one valid document, exit 0", async (tt) => {
  const doc = buildStatus(healthyInputs);
  assertValid(tt, doc);
  tt.equal(doc.healthy, true);
  tt.same(doc.problems, []);
  tt.same(doc.warnings, [], "a cold volume being initialized, and labels the pre-warm moved on, are no warning");
  tt.equal(statusExitCode(doc), 0);
  tt.equal(doc.boot?.source, "pool");
  tt.equal(doc.boot?.durationSeconds, 4.452);
  tt.equal(doc.volume?.serial, "vol0123456789abcdef0");
  tt.equal(doc.mount?.usedRatio, 0.4);
  tt.same([doc.mount?.inodes, doc.mount?.freeInodes], [1000, 750], "statfs's inodes");
  tt.equal(doc.dataRoot?.matches, true);
  tt.equal(doc.prewarm?.progress?.percent, 25);
  tt.same(doc.instanceStore, [{ device: "/dev/nvme2n1", sizeBytes: 900_000_000_000 }], "the instance-store disks");
  const view = renderStatus(doc).join("\n");
  tt.match(view, /instance-store: \/dev\/nvme2n1 838\.2 GiB \(NVMe, left alone by the agent\)/);
  tt.match(view, /^health: +healthy/);
  tt.match(view, /boot: +ready from pool/);
  tt.match(view, /slowest steps: start-docker 2\.1 s, claim-volume 2\.0 s/);
  tt.match(view, /40\.0 % used, 25\.0 % of inodes/);
  tt.match(view, /pre-warm: cold, initializing \(running\), 25\.0 % read/);
});

t.test("unhealthy hosts: each problem named, the exit code a health check reads", async (tt) => {
  const cases: Array<{ name: string; inputs: StatusInputs; problem: RegExp; exit: number }> = [
    { name: "no boot", inputs: { now }, problem: /no boot recorded/, exit: 1 },
    {
      name: "degraded",
      inputs: {
        now,
        boot: {
          ...boot,
          result: {
            outcome: "degraded",
            source: "degraded",
            reason: "no pool volume",
            timeline: [{ step: "claim-volume", ms: 10 }],
          },
        },
      },
      problem: /degraded: no pool volume/,
      exit: 4,
    },
    { name: "not mounted", inputs: { ...healthyInputs, filesystem: undefined }, problem: /not mounted at/, exit: 1 },
    {
      name: "data-root moved",
      inputs: { ...healthyInputs, dockerDataRoot: undefined },
      problem: /data-root is its default/,
      exit: 1,
    },
    {
      name: "full",
      inputs: { ...healthyInputs, filesystem: { ...fs, usedRatio: 0.97 } },
      problem: /97\.0 % full/,
      exit: 1,
    },
    {
      name: "released after the boot",
      inputs: {
        ...healthyInputs,
        release: release("2026-12-01T11:00:00Z", { outcome: "released", released: [readyBoot.volumeId!] }),
      },
      problem: /release \(released\) ran after the boot/,
      exit: 1,
    },
    {
      name: "a corrupt record",
      inputs: { ...healthyInputs, recordProblems: ["last-boot.json does not parse as JSON"] },
      problem: /does not parse/,
      exit: 1,
    },
  ];
  for (const c of cases) {
    const doc = buildStatus(c.inputs);
    assertValid(tt, doc);
    tt.equal(doc.healthy, false, c.name);
    tt.match(doc.problems.join("\n"), c.problem, c.name);
    tt.equal(statusExitCode(doc), c.exit, `${c.name}: exit ${c.exit}`);
    tt.match(renderStatus(doc)[0], /UNHEALTHY/, c.name);
  }
});

function release(finishedAt: string, result: Partial<ReleaseReport>): ReleaseRecord {
  return {
    version: 1,
    instanceId: boot.instanceId,
    finishedAt,
    result: { outcome: "nothing", released: [], kept: [], problems: [], timeline: [], ...result },
  };
}

t.test("warnings do not fail the check", async (tt) => {
  const doc = buildStatus({
    ...healthyInputs,
    filesystem: { ...fs, usedRatio: 0.9 },
    prewarm: { state: { ...prewarm, phase: "initializing" }, running: false },
    labels: { ...boot.labels, "io.simcore.ebs-cache.volume-id": "vol-0fedcba9876543210" },
    release: release("2026-11-30T10:00:00Z", {
      outcome: "refused",
      problems: [
        { step: "unmount", volumeId: "vol-0fedcba9876543210", kind: "refused", message: "busy", remediation: "x" },
      ],
    }),
  });
  assertValid(tt, doc);
  tt.equal(doc.healthy, true);
  tt.equal(statusExitCode(doc), 0);
  tt.equal(doc.lastRelease?.afterBoot, false, "a release before this boot is history");
  tt.match(doc.warnings.join("\n"), /90\.0 % full/);
  tt.match(doc.warnings.join("\n"), /interrupted/);
  tt.match(doc.warnings.join("\n"), /label io\.simcore\.ebs-cache\.volume-id shows "vol-0fedcba9876543210"/);
  tt.match(renderStatus(doc).join("\n"), /warning: .*interrupted/);
  const disabled = buildStatus({
    now,
    boot: {
      ...boot,
      result: { outcome: "disabled", source: "disabled", reason: "ebs-cache:enabled=false", timeline: [] },
    },
  });
  assertValid(tt, disabled);
  tt.equal(disabled.healthy, true, "disabled on purpose is healthy");
  tt.match(disabled.warnings[0]!, /disabled on this host: ebs-cache:enabled=false/);
});

t.test("the schema refuses what it should (so the validations above mean something)", async (tt) => {
  const doc = JSON.parse(JSON.stringify(buildStatus(healthyInputs))) as Record<string, unknown>;
  tt.notOk(validate({ ...doc, healthy: "yes" }), "healthy is a boolean");
  tt.notOk(validate({ ...doc, extra: 1 }), "no unknown field");
  tt.notOk(validate({ ...doc, boot: { ...(doc.boot as object), outcome: "fine" } }), "outcome from the list");
  tt.notOk(
    validate({ ...doc, volume: { ...(doc.volume as object), volumeId: "vol-XYZ" } }),
    "a volume id of EC2's shape",
  );
  tt.notOk(validate({ ...doc, mount: { ...(doc.mount as object), usedRatio: 40 } }), "a ratio, not a percent");
  tt.notOk(validate({ ...doc, generatedAt: "yesterday" }), "an ISO time");
  const { prewarm: _dropped, ...withoutPrewarm } = doc;
  tt.notOk(validate(withoutPrewarm), "every part present (null when absent)");
  tt.notOk(
    validate({ ...doc, instanceStore: [{ device: "/dev/sda", sizeBytes: 1 }] }),
    "an instance-store disk is an NVMe namespace",
  );
  tt.ok(validate({ ...doc, instanceStore: null }), "instanceStore null: not read");
});

t.test("the records: written atomically, read back, a corrupt one reported", async (tt) => {
  const dir = await mkdtemp(join(tmpdir(), "status-"));
  tt.teardown(() => rm(dir, { recursive: true, force: true }));
  tt.same(await readBootRecord(dir), {}, "none yet");
  await writeBootRecord(dir, boot);
  await writeReleaseRecord(dir, release("2026-12-01T11:00:00Z", { outcome: "released" }));
  tt.same((await readBootRecord(dir)).record, boot);
  tt.equal((await readReleaseRecord(dir)).record?.result.outcome, "released");
  await writeFile(join(dir, BOOT_RECORD_FILE), "{ not json");
  tt.match((await readBootRecord(dir)).problem, /does not parse/);
  await writeFile(join(dir, BOOT_RECORD_FILE), JSON.stringify({ version: 2 }));
  tt.match((await readBootRecord(dir)).problem, /not a version 1 record/);
  await writeFile(join(dir, BOOT_RECORD_FILE), JSON.stringify({ ...boot, finishedAt: "never" }));
  tt.match((await readBootRecord(dir)).problem, /finish time/);
});

t.test(
  "observeStatus: the records and the sources into one valid document; a failing source is a problem",
  async (tt) => {
    const dir = await mkdtemp(join(tmpdir(), "status-"));
    tt.teardown(() => rm(dir, { recursive: true, force: true }));
    await writeBootRecord(dir, boot);
    const sources: StatusSources = {
      stateDir: dir,
      prewarm: async () => ({ state: prewarm, running: true }),
      filesystem: async (mountPoint) => (mountPoint === readyBoot.mountPoint ? fs : undefined),
      dockerDataRoot: async () => readyBoot.dataRoot,
      now: () => now,
    };
    const healthy = buildStatus(await observeStatus(sources));
    assertValid(tt, healthy);
    tt.equal(healthy.healthy, true, healthy.problems.join("; "));
    tt.equal(healthy.mount?.usedRatio, 0.4);
    tt.equal(healthy.prewarm?.running, true);
    const failing = buildStatus(
      await observeStatus({
        ...sources,
        dockerDataRoot: async () => {
          throw new Error("daemon.json: Unexpected token");
        },
      }),
    );
    assertValid(tt, failing);
    tt.equal(failing.healthy, false);
    tt.match(failing.problems.join("\n"), /could not read daemon\.json's data-root: daemon\.json: Unexpected token/);

    // A docker that does not answer shows no labels, and that is no problem of the cache's.
    const log = createMemoryLogger();
    const silent = await observeStatus({
      ...sources,
      labels: async () => {
        throw new Error("connect ENOENT /var/run/docker.sock");
      },
      log,
    });
    tt.equal(silent.labels, undefined, "no labels");
    tt.equal(silent.recordProblems, undefined, "no problem");
    tt.match(log.lines.join("\n"), /status\.labels-unread.*ENOENT/, "said at debug");
    const shown = await observeStatus({ ...sources, labels: async () => ({ "io.simcore.ebs-cache.state": "ready" }) });
    tt.same(shown.labels, { "io.simcore.ebs-cache.state": "ready" }, "the labels shown, when docker answers");
  },
);
