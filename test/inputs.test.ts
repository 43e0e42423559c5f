import t, { type Test } from "tap";
import {
  parseWorkspaceIds,
  validateImageRef,
  validateLabelValue,
  validatePoolName,
  validateResourceId,
  type InputCheck,
} from "../src/agent/inputs.ts";

const long = (n: number) => "a".repeat(n);

/** Values every validator must refuse, with a word the problem must contain. */
const HOSTILE: [string, RegExp][] = [
  ["", /is empty/],
  ["$(reboot)", /metacharacter "\$"/],
  ["`reboot`", /metacharacter "`"/],
  ["a;b", /metacharacter ";"/],
  ["a|b", /metacharacter "\|"/],
  ["a&b", /metacharacter "&"/],
  ["a>b", /metacharacter ">"/],
  ["a*", /metacharacter "\*"/],
  ["a'b", /metacharacter "'"/],
  ['a"b', /metacharacter "\\""/],
  ["a\\b", /metacharacter "\\\\"/],
  ["~root", /metacharacter "~"/],
  ["../etc", /"\.\."/],
  ["..", /"\.\."/],
  ["a..b", /"\.\."/],
  ["-rf", /starts with "-"/],
  ["--help", /starts with "-"/],
  ["a b", /whitespace \(U\+0020\)/],
  ["a\tb", /whitespace/],
  ["line1\nline2", /whitespace \(U\+000A\)/],
  ["a\u0000b", /non-printable/],
  ["a\u001bb", /non-printable/],
  ["café", /non-ASCII/],
  ["a\u202eb", /non-ASCII/],
  ["ｐｏｏｌ", /non-ASCII/],
  [long(300), /300 characters long/],
];

function accepts(t: Test, check: (v: unknown) => InputCheck, values: string[]) {
  for (const value of values) {
    const result = check(value);
    t.same(result, { ok: true, value }, `accepts ${JSON.stringify(value)}`);
  }
}

function rejects(t: Test, check: (v: unknown) => InputCheck, cases: [unknown, RegExp][]) {
  for (const [value, pattern] of cases) {
    const result = check(value);
    t.equal(result.ok, false, `rejects ${JSON.stringify(value)?.slice(0, 40)}`);
    if (!result.ok) {
      t.match(result.problem, pattern, `problem for ${JSON.stringify(value)?.slice(0, 40)}`);
      t.ok([...result.problem].every((c) => c >= " " && c <= "~"), "the problem sentence is printable ASCII on one line");
      t.ok(result.problem.length < 300, "the problem sentence does not echo a huge value");
    }
  }
}

t.test("validatePoolName", async (t) => {
  accepts(t, validatePoolName, ["default", "gpu", "sim4life-2024.1", "A_b.c-d", "0", long(63)]);
  rejects(t, validatePoolName, [
    ...HOSTILE,
    [long(64), /64 characters long; at most 63/],
    ["a/b", /contains "\/"/],
    ["/etc", /contains "\/"/],
    [".hidden", /must start with a letter or digit/],
    ["_x", /must start with a letter or digit/],
    ["a:b", /only letters, digits/],
    ["a@b", /only letters, digits/],
    [42, /must be a string, got 42/],
    [null, /must be a string, got null/],
    [undefined, /must be a string/],
  ]);
  const r = validatePoolName("a;b");
  t.same(r, { ok: false, problem: 'pool name "a;b" contains the shell metacharacter ";"' });
});

t.test("validateResourceId", async (t) => {
  accepts(t, validateResourceId, ["1", "42", "0b8f3e8e-6f4e-4c9e-9d6a-3f1f8a1e2b3c", "node_1.v2", long(128)]);
  rejects(t, validateResourceId, [...HOSTILE, [long(129), /at most 128/], ["a/b", /"\/"/], ["%2e%2e", /only letters/]]);
  const r = validateResourceId("../x", "user id");
  t.ok(!r.ok && r.problem.startsWith('user id "../x"'), "names what was checked");
});

t.test("validateLabelValue", async (t) => {
  accepts(t, validateLabelValue, ["true", "vol-0123456789abcdef0", "2024-01-01T00:00:00Z", "a/b:c=d,e@f+g", long(255)]);
  rejects(t, validateLabelValue, [...HOSTILE, [long(256), /at most 255/]]);
});

t.test("validateImageRef", async (t) => {
  const digest = `sha256:${"0123456789abcdef".repeat(4)}`;
  accepts(t, validateImageRef, [
    "nginx",
    "nginx:1.25",
    "library/nginx:latest",
    "itisfoundation/sim4life:3.2.1",
    "registry.example.com:5000/team/app:v1",
    "localhost:5000/app",
    "ghcr.io/org/repo/sub_path__x:Tag-1.0",
    `ghcr.io/org/app@${digest}`,
    `app:1.0@${digest}`,
    "a-b--c.d/e",
  ]);
  rejects(t, validateImageRef, [
    ...HOSTILE,
    [`${"a".repeat(250)}:1.2.3`, /at most 255/],
    ["Nginx", /must be lowercase/],
    ["registry.io/Team/app:1", /must be lowercase/],
    ["nginx:", /not a valid Docker image reference/],
    [":tag", /not a valid Docker image reference/],
    ["a//b", /not a valid Docker image reference/],
    ["nginx:-x", /not a valid Docker image reference/],
    ["/nginx", /not a valid Docker image reference/],
    ["nginx@sha256:abc", /not a valid Docker image reference/],
    [`nginx@sha256:${"0".repeat(63)}`, /64 lowercase hex/],
    ["http://registry/app", /not a valid Docker image reference/],
  ]);
});

t.test("parseWorkspaceIds", async (t) => {
  const TAG = "io.simcore.autoscaling.ec2_instance.docker_node_labels";
  const withLabels = (labels: unknown) => ({ [TAG]: typeof labels === "string" ? labels : JSON.stringify(labels), Name: "x" });
  const uuid = "0b8f3e8e-6f4e-4c9e-9d6a-3f1f8a1e2b3c";

  t.same(parseWorkspaceIds({ Name: "x" }, TAG), { ok: true }, "tag missing: no workspace");
  t.same(parseWorkspaceIds(withLabels({ other: "1" }), TAG), { ok: true }, "no ids in the tag: no workspace");
  t.same(
    parseWorkspaceIds(withLabels({ "user-id": "7", "project-id": uuid, "node-id": uuid }), TAG),
    { ok: true, ids: { userId: "7", projectId: uuid, nodeId: uuid } },
    "plain keys",
  );
  t.same(
    parseWorkspaceIds(
      withLabels({ "io.simcore.runtime.user-id": 7, "io.simcore.runtime.project-id": uuid, "io.simcore.runtime.node-id": uuid, x: 1 }),
      TAG,
    ),
    { ok: true, ids: { userId: "7", projectId: uuid, nodeId: uuid } },
    "prefixed keys, numbers become strings",
  );

  const problem = (labels: unknown) => {
    const r = parseWorkspaceIds(withLabels(labels), TAG);
    t.equal(r.ok, false, `rejects ${JSON.stringify(labels)}`);
    return r.ok ? "" : r.problem;
  };
  t.match(problem("{not json"), /is not valid JSON/);
  t.match(problem("[1,2]"), /must hold a JSON object, got an array/);
  t.match(problem("null"), /must hold a JSON object, got null/);
  t.match(problem("\"x\""), /must hold a JSON object/);
  t.match(problem({ "user-id": "1" }), /project-id and node-id missing/);
  t.match(problem({ "user-id": "1", "project-id": "2" }), /node-id missing/);
  t.match(problem({ "user-id": "$(reboot)", "project-id": "2", "node-id": "3" }), /user-id .* contains the shell metacharacter "\$"/);
  t.match(problem({ "user-id": "1", "project-id": "../etc", "node-id": "3" }), /project-id .*"\.\."/);
  t.match(problem({ "user-id": "1", "project-id": "2", "node-id": "-rf" }), /node-id .*starts with "-"/);
  t.match(problem({ "user-id": "1", "project-id": "2", "node-id": "a\nb" }), /whitespace/);
  t.match(problem({ "user-id": "1", "project-id": "2", "node-id": "a/b" }), /"\/"/);
  t.match(problem({ "user-id": "1", "project-id": "2", "node-id": long(300) }), /300 characters/);
  t.match(problem({ "user-id": null, "project-id": "2", "node-id": "3" }), /user-id .*must be a string, got null/);
  t.match(problem({ "user-id": { a: 1 }, "project-id": "2", "node-id": "3" }), /must be a string/);
  t.match(problem({ "user-id": "1", "a.user-id": "2", "project-id": "2", "node-id": "3" }), /conflicting user-id values/);
  t.same(
    parseWorkspaceIds(withLabels({ "user-id": "1", "a.user-id": 1, "project-id": "2", "node-id": "3" }), TAG),
    { ok: true, ids: { userId: "1", projectId: "2", nodeId: "3" } },
    "the same id under two keys is fine",
  );
  const both = problem({ "user-id": ";", "project-id": "2", "node-id": "`" });
  t.match(both, /user-id.*; node-id/, "every bad id is reported");
});
