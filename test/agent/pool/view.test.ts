/** The pool view: pure rows and table. */
import t from "tap";
import { poolRows } from "../../../src/agent/pool/rows.ts";
import { poolReport } from "../../../src/agent/pool/summary.ts";
import { renderPoolTable } from "../../../src/agent/pool/view.ts";
import type { VolumeInfo } from "../../../src/agent/ports.ts";
import { VolumeTag } from "../../../src/tags.ts";

const now = new Date("2026-12-01T12:00:00Z");
const base = { [VolumeTag.managed]: "true", [VolumeTag.pool]: "p" };
const vol = (id: string, tags: Record<string, string>): VolumeInfo => ({
  volumeId: id,
  availabilityZone: "eu-west-1a",
  state: "available",
  sizeGiB: 10,
  tags: { ...base, ...tags },
});
const prices = { gibMonthUsd: 0.08, iopsMonthUsd: 0.005, throughputMonthUsd: 0.04, snapshotGibMonthUsd: 0.05 };

t.test("quarantined volumes and workspace ids show", async (t) => {
  const volumes = [
    vol("vol-q", {
      [VolumeTag.kind]: "pool",
      [VolumeTag.lastError]: "i-1: foreign ext4",
      [VolumeTag.lastErrorAt]: "2026-12-01T11:00:00.000Z",
    }),
    vol("vol-old", {
      [VolumeTag.kind]: "pool",
      [VolumeTag.lastError]: "i-2: no device",
      [VolumeTag.lastErrorAt]: "2026-11-30T11:00:00.000Z",
    }),
    vol("vol-w", {
      [VolumeTag.kind]: "workspace",
      [VolumeTag.workspaceKeys]: "user-id",
      [VolumeTag.userId]: "user_42",
    }),
  ];
  const rows = poolRows(volumes, now, 6);
  const byId = Object.fromEntries(rows.map((r) => [r.volumeId, r]));
  t.same(byId["vol-q"]?.lastError, { message: "i-1: foreign ext4", at: "2026-12-01T11:00:00.000Z", quarantined: true });
  t.equal(byId["vol-old"]?.lastError?.quarantined, false, "past claim.quarantineHours: a candidate again");
  t.same(byId["vol-w"]?.workspace, { "user-id": "user_42" }, "a user-level workspace shows only its user id");
  const report = poolReport(
    { volumes, snapshots: [] },
    { quarantineHours: 6, prices, pool: "p", imageSet: null, keeper: null },
    now,
  );
  t.same(
    report.volumes.map((r) => r.volumeId),
    rows.map((r) => r.volumeId),
    "the report keeps the rows and their order",
  );
  const narrow = renderPoolTable(report.volumes);
  t.notMatch(narrow, /LAST-ERROR|WORKSPACE|USD/, "the default table leaves out the wide columns");
  t.match(narrow, /vol-q .*available, quarantined/, "a quarantine still shows");
  t.ok(
    narrow.split("\n").every((line) => line.length <= 140),
    `the default table fits 140 columns (widest ${Math.max(...narrow.split("\n").map((l) => l.length))})`,
  );
  const table = renderPoolTable(report.volumes, { wide: true });
  t.match(table, /LAST-ERROR/);
  t.match(table, /vol-q .*quarantined: i-1: foreign ext4/);
  t.match(table, /vol-w .*user-id=user_42/);
  t.match(table, /vol-q .* 0\.80 /, "each volume's monthly cost: 10 GiB at 0.08");
});
