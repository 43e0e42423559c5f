/**
 * osparc's node-labels instance tag as its autoscaler writes it (single, or chunks of 256
 * characters), and what the agent takes from it: the workspace ids for the configured keys,
 * `keep` / `enabled` under the agent's prefix. A corpus of the forms osparc produces and of the
 * ways one can be broken; none of them refuses the boot.
 */
import t from "tap";
import { labelsTagAsOsparcWrites, LABELS_CHUNK_SIZE, readLabelsTag } from "../../src/agent/labels-tag.ts";
import { readOsparcRequest, resolveSettings } from "../../src/agent/settings.ts";
import { workspaceIdsFromLabels, type WorkspaceKeySettings } from "../../src/agent/workspace-ids.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { readLabelSwitches } from "../../src/config/overrides.ts";

const KEY = "io.simcore.autoscaling.ec2_instance.docker_node_labels";
const DEFAULT_KEYS: WorkspaceKeySettings = { idKeys: ["user-id", "project-id", "node-id"], minimumKeys: ["user-id"] };
const uuid = (n: number) => `0b8f3e8e-6f4e-4c9e-9d6a-${String(n).padStart(12, "0")}`;

/** Labels whose JSON text is about `length` characters: real ids plus filler labels. */
function labelsOfLength(length: number, ids: Record<string, unknown>): Record<string, unknown> {
  const labels: Record<string, unknown> = { ...ids };
  let i = 0;
  while (JSON.stringify(labels).length < length) labels[`io.simcore.filler-${i++}`] = "x".repeat(20);
  return labels;
}

/** The tags in a shuffled key order (EC2 gives no order): chunk index order must not depend on it. */
function shuffled(tags: Record<string, string>): Record<string, string> {
  const entries = Object.entries(tags);
  return Object.fromEntries([
    ...entries.filter((_, i) => i % 2 === 1).reverse(),
    ...entries.filter((_, i) => i % 2 === 0),
  ]);
}

t.test("the single tag", async (t) => {
  const labels = { "user-id": "42", "product-name": "osparc" };
  const tags = labelsTagAsOsparcWrites(KEY, labels);
  t.same(Object.keys(tags), [KEY], "short JSON: one tag, as osparc writes it");
  t.same(readLabelsTag({ ...tags, Name: "n" }, KEY), { found: true, ok: true, labels, form: "single", chunks: 1 });
  t.same(readLabelsTag({ Name: "n" }, KEY), { found: false }, "absent");
  t.same(
    readLabelsTag({ [`${KEY}x`]: "{}", [`${KEY}_a`]: "{}", [`x${KEY}`]: "{}" }, KEY),
    { found: false },
    "keys that only look like it are not it",
  );
});

t.test("chunked: 2, 3 and 11 chunks, joined in index order whatever the key order", async (t) => {
  for (const count of [2, 3, 11]) {
    const ids = { "user-id": "user_42", "project-id": uuid(count), "node-id": uuid(count + 1) };
    const labels = labelsOfLength(LABELS_CHUNK_SIZE * (count - 1) + 10, ids);
    const tags = labelsTagAsOsparcWrites(KEY, labels);
    t.equal(Object.keys(tags).length, count, `${count} chunks written`);
    t.ok(
      Object.values(tags).every((v) => v.length <= LABELS_CHUNK_SIZE),
      "each within EC2's 256 characters",
    );
    const mixed = shuffled({ ...tags, Name: "node", "io.simcore.autoscaling.monitored_nodes_labels": "[]" });
    t.not(
      Object.keys(mixed)
        .filter((k) => k.startsWith(KEY))
        .join(),
      Object.keys(tags).join(),
      "the keys come in another order",
    );
    const read = readLabelsTag(mixed, KEY);
    t.same(read, { found: true, ok: true, labels, form: "chunked", chunks: count }, `${count} chunks read back`);
    if (read.found && read.ok)
      t.same(workspaceIdsFromLabels(read.labels, DEFAULT_KEYS), { ok: true, ids }, "the ids inside");
  }
  // 11 chunks: `_10` sorts before `_2` as text; the index is a number.
  const labels = labelsOfLength(LABELS_CHUNK_SIZE * 10 + 5, { "user-id": 7 });
  const tags = labelsTagAsOsparcWrites(KEY, labels);
  const textOrder = Object.fromEntries(Object.entries(tags).sort(([a], [b]) => (a < b ? -1 : 1)));
  t.same(
    readLabelsTag(textOrder, KEY),
    { found: true, ok: true, labels: { ...labels, "user-id": "7" }, form: "chunked", chunks: 11 },
    "_10 comes after _9, not after _1 (the number as its text)",
  );
});

t.test("broken forms: one problem, never a guess", async (t) => {
  const labels = labelsOfLength(LABELS_CHUNK_SIZE * 2 + 10, { "user-id": "1" });
  const tags = labelsTagAsOsparcWrites(KEY, labels);
  const problem = (tagsIn: Record<string, string>) => {
    const read = readLabelsTag(tagsIn, KEY);
    t.ok(read.found && !read.ok, "a problem");
    const text = read.found && !read.ok ? read.problem : "";
    t.ok(
      [...text].every((c) => c >= " " && c <= "~"),
      "printable, one line",
    );
    t.ok(text.startsWith(`instance tag "${KEY}": `), "names the tag");
    return text;
  };
  const { [`${KEY}_1`]: _gone, ...gap } = tags;
  t.match(problem(gap), /chunk _1 missing \(found _0, _2\)/, "a gap");
  const { [`${KEY}_0`]: _first, ...noFirst } = tags;
  t.match(problem(noFirst), /chunk _0 missing/, "no first chunk");
  t.match(
    problem({ ...tags, [KEY]: JSON.stringify({ "user-id": "2" }) }),
    /both whole and in 3 chunk/,
    "both forms present",
  );
  t.match(problem({ ...tags, [`${KEY}_01`]: "x" }), /leading zero/, "an index spelled with a leading zero");
  t.match(problem({ [KEY]: "{not json" }), /not valid JSON/);
  t.match(
    problem({ [`${KEY}_0`]: '{"user-id": "1",', [`${KEY}_1`]: '"x": ' }),
    /not valid JSON/,
    "chunks that do not make JSON",
  );
  t.match(problem({ [KEY]: "[1,2]" }), /must hold a JSON object, got an array/);
  t.match(problem({ [KEY]: "null" }), /got null/);
  t.match(problem({ [KEY]: '"user-id"' }), /got "user-id"/);
  t.match(problem({ [KEY]: "42" }), /got 42/);
  t.match(problem({ [KEY]: "" }), /not valid JSON/, "empty text");
  t.match(problem({ [KEY]: "{\u001b[31m" }), /not valid JSON/, "control characters are not echoed raw");
});

t.test("workspace ids: whichever keys are there, at least the minimum", async (t) => {
  const ids = (labels: Record<string, unknown>, settings: WorkspaceKeySettings = DEFAULT_KEYS) =>
    workspaceIdsFromLabels(labels, settings);
  t.same(ids({}), { ok: true }, "empty object: no workspace");
  t.same(ids({ "product-name": "osparc", other: "1" }), { ok: true }, "no configured id: no workspace");
  t.same(
    ids({ "product-name": "osparc", "user-id": "user_42" }),
    { ok: true, ids: { "user-id": "user_42" } },
    "osparc's own example: product-name + user-id, a templated value",
  );
  t.match(
    ids({ "user-id": 42, "project-id": uuid(1) }),
    { ok: false, problem: /user-id must be a string, got 42/ },
    "a JS number has lost its source text: refused (the tag's numbers arrive as text)",
  );
  t.same(
    ids({ "io.simcore.runtime.user-id": "7", "io.simcore.runtime.node-id": uuid(2) }),
    { ok: true, ids: { "user-id": "7", "node-id": uuid(2) } },
    "keys ending in .<key>",
  );
  t.same(
    ids({ "user-id": "1", "a.user-id": "1" }),
    { ok: true, ids: { "user-id": "1" } },
    "the same id under two keys",
  );
  t.same(
    ids(
      { "user-id": "1", "wallet-id": "w9", "product-name": "s4l" },
      { idKeys: ["user-id", "wallet-id", "product-name"], minimumKeys: ["user-id", "wallet-id"] },
    ),
    { ok: true, ids: { "user-id": "1", "wallet-id": "w9", "product-name": "s4l" } },
    "wallet-id and product-name when configured",
  );
  t.same(
    ids({ "user-id": "1", "wallet-id": "w9" }),
    { ok: true, ids: { "user-id": "1" } },
    "keys not configured are not ids",
  );
  const below = ids({ "project-id": "p", "node-id": "n" });
  t.same(below.ok && below.ids, undefined, "project-id + node-id without user-id (minimumKeys): no workspace");
  t.match(below.ok ? below.note : "", /name project-id, node-id but not user-id/, "with a note saying why");
  t.same(
    ids({ "user-id": "1" }, { idKeys: ["user-id", "project-id"], minimumKeys: ["user-id", "project-id"] }).ok,
    true,
  );

  const problem = (labels: Record<string, unknown>) => {
    const r = ids(labels);
    t.equal(r.ok, false, `refuses ${JSON.stringify(labels).slice(0, 60)}`);
    return r.ok ? "" : r.problem;
  };
  t.match(problem({ "user-id": { nested: "1" } }), /user-id must be a string, got an object/, "a nested value");
  t.match(problem({ "user-id": ["1"] }), /got an array/);
  t.match(problem({ "user-id": true }), /got true/);
  t.match(problem({ "user-id": null }), /got null/);
  t.match(problem({ "user-id": "$(reboot)" }), /metacharacter "\$"/);
  t.match(problem({ "user-id": "1", "project-id": "../etc" }), /project-id .*"\.\."/);
  t.match(problem({ "user-id": "1", "node-id": "-rf" }), /starts with "-"/);
  t.match(problem({ "user-id": "a\nb" }), /whitespace/);
  t.match(problem({ "user-id": "u*" }), /metacharacter "\*"/, "an EC2 filter wildcard");
  t.match(problem({ "user-id": "x".repeat(257) }), /257 characters/);
  t.match(problem({ "user-id": "1", "a.user-id": "2" }), /conflicting user-id values/);
  t.match(
    problem({ "x.user-id": ";", "node-id": "`" }),
    /label "x.user-id": user-id .*; node-id/,
    "every bad id is reported, in one line",
  );
  t.same(
    ids({ other: { deep: [1, { x: null }] }, "user-id": "3" }),
    { ok: true, ids: { "user-id": "3" } },
    "nested values of other labels do not matter",
  );
});

t.test("keep and enabled under the agent's prefix", async (t) => {
  const P = "io.simcore.ebs-cache";
  t.same(readLabelSwitches({}, P), { keepMalformed: false, warnings: [] });
  t.same(
    readLabelSwitches({ [`${P}.keep`]: "true", [`${P}.enabled`]: false }, P),
    { keep: true, enabled: false, keepMalformed: false, warnings: [] },
    "strings and booleans",
  );
  t.same(readLabelSwitches({ [`${P}.keep`]: " FALSE ", [`${P}.enabled`]: "True" }, P), {
    keep: false,
    enabled: true,
    keepMalformed: false,
    warnings: [],
  });
  const bad = readLabelSwitches({ [`${P}.keep`]: "yes", [`${P}.enabled`]: 1 }, P);
  t.same(
    [bad.keep, bad.enabled, bad.keepMalformed],
    [undefined, undefined, true],
    "malformed: not applied; a malformed keep counts as keep at release",
  );
  t.equal(bad.warnings.length, 2);
  t.match(bad.warnings[0], /io\.simcore\.ebs-cache\.keep .*got "yes"/);
  t.same(
    readLabelSwitches({ "other.prefix.keep": "true", keep: "true" }, P),
    { keepMalformed: false, warnings: [] },
    "only the agent's prefix",
  );
});

t.test(
  "settings: a broken labels tag is a warning and the pool, never exit 3; the ebs-cache:* tags still are",
  async (t) => {
    const config = defaultConfig();
    const identity = (tags: Record<string, string>) => ({
      instanceId: "i-0aaa",
      region: "eu-west-1",
      availabilityZone: "eu-west-1a",
      tags,
      tagsSource: "ec2" as const,
    });
    const resolve = (tags: Record<string, string>) => resolveSettings(config, identity(tags), { withDocker: false });

    const chunked = labelsTagAsOsparcWrites(
      KEY,
      labelsOfLength(600, {
        "user-id": "user_42",
        "io.simcore.ebs-cache.keep": "true",
        "io.simcore.ebs-cache.enabled": "false",
      }),
    );
    const ok = resolve(chunked);
    t.ok(ok.ok, "resolved");
    if (ok.ok) {
      t.same(ok.value.boot.workspace, { "user-id": "user_42" }, "a user-level workspace from the chunked tag");
      t.equal(ok.value.effective.keep, true, "keep from the labels");
      t.equal(ok.value.boot.enabled, false, "enabled from the labels");
      t.same(ok.value.warnings, []);
      t.match(ok.value.applied.join("\n"), /keep = true \(instance tag .* in 3 chunks\)/);
    }
    const tagWins = resolve({ ...chunked, "ebs-cache:enabled": "true", "ebs-cache:keep": "false" });
    t.ok(
      tagWins.ok && tagWins.value.boot.enabled === true && tagWins.value.effective.keep === false,
      "the ebs-cache:* instance tags win over the labels",
    );

    const { [`${KEY}_1`]: _gone, ...gap } = chunked;
    for (const [what, tags] of [
      ["a gap", gap],
      ["bad JSON", { [KEY]: "{" }],
      ["an array", { [KEY]: "[]" }],
      ["a bad id", { [KEY]: JSON.stringify({ "user-id": "a b" }) }],
    ] as const) {
      const r = resolve(tags);
      t.ok(r.ok, `${what}: resolved, not refused`);
      if (r.ok) {
        t.equal(r.value.boot.workspace, undefined, `${what}: no workspace (the pool)`);
        t.equal(r.value.warnings.length, 1, `${what}: one warning line`);
        t.equal(r.value.boot.enabled, true, `${what}: nothing of the tag applied`);
      }
    }
    const refused = resolve({ ...chunked, "ebs-cache:pool": "a;b" });
    t.notOk(refused.ok, "a bad ebs-cache:pool still refuses the boot (exit 3)");
  },
);

t.test(
  "later runs read what phase 1 recorded; phase 1 reads the tag, or the record when the tag is gone",
  async (t) => {
    const config = defaultConfig();
    const identity = (tags: Record<string, string>, instanceId = "i-0aaa") => ({
      instanceId,
      region: "r",
      availabilityZone: "z",
      tags,
      tagsSource: "imds" as const,
    });
    const recorded = {
      instanceId: "i-0aaa",
      recordedAt: "2026-01-01T00:00:00.000Z",
      ids: { "user-id": "9" },
      keep: true,
    };
    const other = labelsTagAsOsparcWrites(KEY, { "user-id": "10" });

    t.same(
      readOsparcRequest(config, identity(other), { fromTag: false, recorded }).ids,
      { "user-id": "9" },
      "phase 2 / release: the record, even when a newer tag is there",
    );
    t.same(
      readOsparcRequest(config, identity(other), { fromTag: true, recorded }).ids,
      { "user-id": "10" },
      "phase 1: the tag",
    );
    const gone = readOsparcRequest(config, identity({}), { fromTag: true, recorded });
    t.same(
      [gone.ids, gone.keep, gone.fromRecord],
      [{ "user-id": "9" }, true, true],
      "phase 1 after the join (a reboot): the record",
    );
    t.same(
      readOsparcRequest(config, identity({}, "i-0bbb"), { fromTag: false, recorded }).ids,
      undefined,
      "another instance's record is not used",
    );
    t.same(
      readOsparcRequest(config, identity(other, "i-0bbb"), { fromTag: false, recorded }).ids,
      { "user-id": "10" },
      "no record of this instance: the tag",
    );
  },
);
