/**
 * The refresh as operators see it: the `refresh` block of the status document (valid against
 * schema/status.schema.json), failed pulls and an interrupted refresh as warnings that never
 * make the host unhealthy, the human line, the metrics families, and the state file read back.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readFile } from "node:fs/promises";
import t from "tap";
import { Ajv } from "ajv";
import {
  readRefreshState,
  REFRESH_STATE_FILE,
  writeRefreshState,
  type RefreshState,
} from "../../../src/agent/refresh/state.ts";
import { refreshMetrics } from "../../../src/metrics/refresh.ts";
import { renderTextFormat } from "../../../src/metrics/render.ts";
import { buildStatus } from "../../../src/status/document.ts";
import type { BootRecord } from "../../../src/status/records.ts";
import { renderStatus, statusExitCode } from "../../../src/status/view.ts";
import { readyBoot } from "../../fixtures/builders/use-case-results.ts";

const schema = JSON.parse(
  await readFile(new URL("../../../schema/status.schema.json", import.meta.url), "utf8"),
) as object;
const validate = new Ajv({ allErrors: true, strict: true }).compile(schema);
const now = new Date("2026-12-01T12:00:00Z");
const boot: BootRecord = {
  version: 1,
  instanceId: "i-0123456789abcdef0",
  finishedAt: "2026-12-01T11:59:00.000Z",
  result: { ...readyBoot, mountPoint: undefined, dataRoot: undefined },
};
const state: RefreshState = {
  version: 1,
  pid: 1,
  volumeId: "vol-0123456789abcdef0",
  generation: "platform@2026-11-20T00:00:00.000Z",
  phase: "done",
  images: [
    { image: "lab/a:1", sources: ["generation"], phase: "present" },
    { image: "lab/b:2", sources: ["generation", "pre-pulled"], phase: "pulled", bytes: 3 * 1024 ** 2, seconds: 2.5 },
    {
      image: "lab/c:1",
      sources: ["generation"],
      phase: "failed",
      seconds: 0.4,
      error: "docker pull lab/c:1 exited with 1: not found",
    },
  ],
  markedCurrent: false,
  warnings: [],
  startedAt: "2026-12-01T11:59:01.000Z",
  updatedAt: "2026-12-01T11:59:04.000Z",
  finishedAt: "2026-12-01T11:59:04.000Z",
};

t.test("a failed pull is a warning: the host stays healthy", async (t) => {
  const doc = buildStatus({ now, boot, refresh: { state, running: false } });
  t.ok(validate(JSON.parse(JSON.stringify(doc))), "valid", { errors: validate.errors });
  t.equal(doc.healthy, true);
  t.equal(statusExitCode(doc), 0);
  t.match(doc.refresh, {
    phase: "done",
    wanted: 3,
    present: 1,
    pulled: 1,
    failed: 1,
    pending: 0,
    pulledBytes: 3 * 1024 ** 2,
    markedCurrent: false,
  });
  t.match(doc.warnings, [/could not pull 1 of 3 image\(s\): lab\/c:1/]);
  t.match(
    renderStatus(doc).join("\n"),
    /refresh: {2}done toward platform@2026-11-20T00:00:00.000Z \(2 of 2 pulls done: 1 pulled, 1 failed, 1 present\)/,
  );
});

t.test("a refresh killed mid-way is a warning; none ran: null", async (t) => {
  const killed = { ...state, phase: "running" as const, images: [{ ...state.images[1]!, phase: "pulling" as const }] };
  const doc = buildStatus({ now, boot, refresh: { state: killed, running: false } });
  t.ok(validate(JSON.parse(JSON.stringify(doc))), "valid", { errors: validate.errors });
  t.equal(doc.healthy, true);
  t.match(doc.warnings, [/the refresh was interrupted/]);
  t.equal(doc.refresh?.pending, 1, "a pull in flight counts as pending");
  t.same(buildStatus({ now, boot, refresh: { state: killed, running: true } }).warnings, [], "running: no warning");
  const none = buildStatus({ now, boot });
  t.equal(none.refresh, null);
  t.ok(validate(JSON.parse(JSON.stringify(none))));
});

t.test("metrics: images by phase, bytes pulled", async (t) => {
  const text = renderTextFormat(refreshMetrics(state));
  t.match(text, /ebs_cache_agent_refresh_images\{phase="pulled"\} 1\n/);
  t.match(text, /ebs_cache_agent_refresh_images\{phase="pending"\} 0\n/, "every phase has a series, zero included");
  t.match(text, /ebs_cache_agent_refresh_pulled_bytes 3145728\n/);
  t.match(
    text,
    new RegExp(
      String.raw`ebs_cache_agent_refresh_info\{volume_id="vol-0123456789abcdef0",phase="done",gen` +
        String.raw`eration="platform@2026-11-20T00:00:00.000Z"\} ` +
        String.raw`1`,
    ),
  );
});

t.test("the state file: written, read back; a file that is not one is refused", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "refresh-state-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  t.equal(await readRefreshState(dir), undefined, "none yet");
  await writeRefreshState(dir, state);
  t.same(await readRefreshState(dir), state);
  await writeFile(join(dir, REFRESH_STATE_FILE), '{"version": 2}');
  await t.rejects(readRefreshState(dir), /not a version 1 refresh state/);
});
