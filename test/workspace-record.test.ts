/**
 * The first boot phase's record of what osparc's labels tag asked (`<stateDir>/workspace.json`):
 * written atomically, read back with the same checks as the tag.
 */
import t from "tap";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { parseWorkspaceRecord, readWorkspaceRecord, workspaceRecordPath, writeWorkspaceRecord } from "../src/agent/workspace-record.ts";

const good = { instanceId: "i-0123456789abcdef0", recordedAt: "2026-12-01T10:00:00.000Z", ids: { "user-id": "user_42", "project-id": "p-1" }, keep: true, enabled: true };

t.test("written and read back; no temp file left", async (t) => {
  const dir = join(t.testdir(), "state");
  t.same(await readWorkspaceRecord(dir), {}, "no record yet");
  await writeWorkspaceRecord(dir, good);
  t.same(await readWorkspaceRecord(dir), { record: good });
  await writeWorkspaceRecord(dir, { instanceId: good.instanceId, recordedAt: good.recordedAt });
  t.same(await readWorkspaceRecord(dir), { record: { instanceId: good.instanceId, recordedAt: good.recordedAt } }, "replaced whole: no workspace now");
  t.same(await readdir(dir), ["workspace.json"], "only the record");
  t.match(await readFile(workspaceRecordPath(dir), "utf8"), /\n$/);
});

t.test("a damaged or tampered record is a problem, never used", async (t) => {
  const dir = t.testdir();
  const problem = async (text: string) => {
    await writeFile(workspaceRecordPath(dir), text);
    const read = await readWorkspaceRecord(dir);
    t.equal(read.record, undefined, `not used: ${text.slice(0, 50)}`);
    return read.problem ?? "";
  };
  t.match(await problem("{"), /not valid JSON/);
  t.match(await problem("[]"), /not a JSON object/);
  t.match(await problem(JSON.stringify({ ...good, instanceId: "../x" })), /instanceId/);
  t.match(await problem(JSON.stringify({ ...good, ids: { "user-id": "$(reboot)" } })), /metacharacter/);
  t.match(await problem(JSON.stringify({ ...good, ids: { "group-id": "1" } })), /unknown id key "group-id"/);
  t.match(await problem(JSON.stringify({ ...good, keep: "yes" })), /keep is not a boolean/);
  t.same(parseWorkspaceRecord({ ...good, ids: {} }), { ok: true, record: { instanceId: good.instanceId, recordedAt: good.recordedAt, keep: true, enabled: true } }, "empty ids: none");
});
