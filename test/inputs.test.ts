import t, { type Test } from "tap";
import {
  validateImageRef,
  validatePoolName,
  validateResourceId,
  validateTagValue,
  validateWorkspaceId,
  type InputCheck,
} from "../src/inputs.ts";
import { MAX_TAG_VALUE } from "../src/tags.ts";

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
      t.ok(
        [...result.problem].every((c) => c >= " " && c <= "~"),
        "the problem sentence is printable ASCII on one line",
      );
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

t.test("validateTagValue: up to EC2's 256 characters", async (t) => {
  accepts(t, validateTagValue, [
    "true",
    "vol-0123456789abcdef0",
    "2024-01-01T00:00:00Z",
    "a/b:c=d,e@f+g",
    long(MAX_TAG_VALUE),
  ]);
  rejects(t, validateTagValue, [...HOSTILE, [long(MAX_TAG_VALUE + 1), /at most 256/]]);
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

t.test(
  "validateWorkspaceId: opaque values up to 256 characters (a tag value, then a label value), hostile ones refused",
  async (t) => {
    accepts(t, (v) => validateWorkspaceId(v, "user-id"), [
      "42",
      "user_42",
      "0b8f3e8e-6f4e-4c9e-9d6a-3f1f8a1e2b3c",
      "osparc",
      "s4l:lite",
      "a@b",
      "x=y",
      ".hidden",
      "_x",
      long(256),
    ]);
    rejects(t, (v) => validateWorkspaceId(v, "user-id"), [
      ...HOSTILE,
      [long(257), /257 characters long; at most 256/],
      ["a/b", /contains "\/"/],
      ["a?b", /metacharacter "\?"/],
      [42, /user-id must be a string, got 42/],
      [null, /must be a string, got null/],
    ]);
  },
);
