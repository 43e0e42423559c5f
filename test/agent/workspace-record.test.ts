/**
 * The first boot phase's record of what osparc's labels tag asked (`<stateDir>/workspace.json`):
 * written atomically, read back with the same checks as the tag, and used only within the
 * activation that wrote it; and what phase 1 waits for before it reads the tags.
 */
import t from "tap";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  parseWorkspaceRecord,
  readWorkspaceRecord,
  sameActivation,
  workspaceRecordPath,
  writeWorkspaceRecord,
} from "../../src/agent/workspace-record.ts";
import { awaitedTags } from "../../src/agent/boot/observe.ts";

const good = {
  instanceId: "i-0123456789abcdef0",
  recordedAt: "2026-12-01T10:00:00.000Z",
  ids: { "user-id": "user_42", "project-id": "p-1" },
  keep: true,
  enabled: true,
};

t.test("written and read back; no temp file left", async (t) => {
  const dir = join(t.testdir(), "state");
  t.same(await readWorkspaceRecord(dir), {}, "no record yet");
  await writeWorkspaceRecord(dir, good);
  t.same(await readWorkspaceRecord(dir), { record: good });
  await writeWorkspaceRecord(dir, { instanceId: good.instanceId, recordedAt: good.recordedAt });
  t.same(
    await readWorkspaceRecord(dir),
    { record: { instanceId: good.instanceId, recordedAt: good.recordedAt } },
    "replaced whole: no workspace now",
  );
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
  t.same(
    parseWorkspaceRecord({ ...good, ids: {} }),
    { ok: true, record: { instanceId: good.instanceId, recordedAt: good.recordedAt, keep: true, enabled: true } },
    "empty ids: none",
  );
});

t.test(
  "one activation: same instance and LaunchTime (a reboot), else the same boot id; a stop and start is another",
  async (t) => {
    const at = "2026-12-01T10:00:00.000Z";
    const later = "2026-12-01T12:00:00.000Z";
    const record = { instanceId: good.instanceId, launchTime: at, bootId: "boot-1" };
    t.ok(
      sameActivation(record, { instanceId: good.instanceId, launchTime: at, bootId: "boot-1" }),
      "phase 2 of the same boot",
    );
    t.ok(
      sameActivation(record, { instanceId: good.instanceId, launchTime: at, bootId: "boot-2" }),
      "a reboot: the launch time is unchanged",
    );
    t.notOk(
      sameActivation(record, { instanceId: good.instanceId, launchTime: later, bootId: "boot-1" }),
      "a new launch time decides, whatever the boot id says",
    );
    t.notOk(
      sameActivation(record, { instanceId: good.instanceId, launchTime: later, bootId: "boot-2" }),
      "a stop and start",
    );
    t.notOk(
      sameActivation(record, { instanceId: "i-0fedcba9876543210", launchTime: at, bootId: "boot-1" }),
      "another instance (a copied disk)",
    );
    t.ok(
      sameActivation(record, { instanceId: good.instanceId, bootId: "boot-1" }),
      "launch time unknown now: the boot id decides",
    );
    t.notOk(
      sameActivation(record, { instanceId: good.instanceId, bootId: "boot-2" }),
      "launch time unknown, another boot: not the same",
    );
    t.notOk(
      sameActivation(
        { instanceId: good.instanceId },
        { instanceId: good.instanceId, launchTime: at, bootId: "boot-1" },
      ),
      "a record that says neither: an earlier activation",
    );
    t.notOk(sameActivation(record, { instanceId: good.instanceId }), "nothing known now: not the same");
  },
);

t.test("the activation's fields are read back and checked", async (t) => {
  t.same(parseWorkspaceRecord({ ...good, launchTime: "2026-12-01T10:00:00.000Z", bootId: "b" }), {
    ok: true,
    record: { ...good, launchTime: "2026-12-01T10:00:00.000Z", bootId: "b" },
  });
  t.match(parseWorkspaceRecord({ ...good, launchTime: 5 }), {
    ok: false,
    problem: /launchTime is not a non-empty string/,
  });
  t.match(parseWorkspaceRecord({ ...good, bootId: "" }), { ok: false, problem: /bootId/ });
  t.same(parseWorkspaceRecord({ ...good, volumeId: "vol-0123456789abcdef0" }), {
    ok: true,
    record: { ...good, volumeId: "vol-0123456789abcdef0" },
  });
  t.match(
    parseWorkspaceRecord({ ...good, volumeId: "../vol-1" }),
    { ok: false, problem: /volumeId is not a volume id/ },
    "a copy on a volume names a volume id, nothing else",
  );
});

t.test("what phase 1 waits for: the activation's tags on a stopped warm buffer started again", async (t) => {
  const LABELS = "io.simcore.autoscaling.ec2_instance.docker_node_labels";
  const WARM = "io.simcore.autoscaling.warm_buffer_machine";
  const wait = (tags: Record<string, string>, mode = "warm-buffer", startedBefore = true) =>
    awaitedTags(tags, { labelsTag: LABELS, mode, startedBefore }) !== undefined;
  t.ok(wait({ [WARM]: "true" }), "`true` on an instance that ran before: the boot runs before osparc's CreateTags");
  t.notOk(
    wait({ [WARM]: "true" }, "warm-buffer", false),
    "`true` on the first boot: the buffer's creation, nothing to wait for",
  );
  t.notOk(
    wait({ [WARM]: "false" }),
    "`false` without labels: osparc writes both in one CreateTags, none will come (a hot-buffer refill)",
  );
  t.notOk(wait({ [WARM]: "false", [LABELS]: "{}" }), "`false` with labels");
  t.notOk(wait({ [WARM]: "true", [`${LABELS}_0`]: "{" }), "labels (chunked) already there");
  t.notOk(wait({}), "a cold launch without labels (osparc's default placement config)");
  t.ok(wait({ "io.simcore.autoscaling.buffer_machine": "true" }), "the legacy key");
  t.notOk(wait({ [WARM]: "true" }, "never"), "never");
  t.ok(wait({}, "always", false), "always: any instance without the labels tag");
  t.ok(wait({ [WARM]: "true" }, "always", false), "always: even a first boot");
});
