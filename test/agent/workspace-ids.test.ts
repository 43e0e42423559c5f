/**
 * Ids are text: the labels tag read member by member, each number as its source text, so that
 * two users are never one (integers beyond 2^53, exponents, fractions) and `42` is `"42"` (the
 * text a template renders). A corpus of number forms, strings against numbers, duplicate keys and
 * unicode escapes, checked down to the ids the boot compares.
 */
import t from "tap";
import { isNumberSource, objectMembers } from "../../src/agent/json-members.ts";
import { readLabelsTag } from "../../src/agent/labels-tag.ts";
import { workspaceIdsFromLabels, type WorkspaceKeySettings } from "../../src/agent/workspace-ids.ts";

const KEY = "io.simcore.autoscaling.ec2_instance.docker_node_labels";
const KEYS: WorkspaceKeySettings = { idKeys: ["user-id", "project-id", "node-id"], minimumKeys: ["user-id"] };

/** The ids the boot would use for this tag text, or the problem. */
function idsOf(text: string): { ids?: Record<string, string>; problem?: string } {
  const read = readLabelsTag({ [KEY]: text }, KEY);
  if (!read.found) return { problem: "absent" };
  if (!read.ok) return { problem: read.problem };
  const result = workspaceIdsFromLabels(read.labels, KEYS);
  return result.ok ? { ...(result.ids ? { ids: { ...result.ids } } : {}) } : { problem: result.problem };
}

t.test("integers beyond 2^53 are two users, never one", async (t) => {
  const a = "9007199254740993";
  const b = "9007199254740992";
  t.equal(JSON.parse(a), JSON.parse(b), "JSON.parse makes them one double (what this guards against)");
  t.same(idsOf(`{"user-id":${a}}`), { ids: { "user-id": a } });
  t.same(idsOf(`{"user-id":${b}}`), { ids: { "user-id": b } });
  t.not(idsOf(`{"user-id":${a}}`).ids?.["user-id"], idsOf(`{"user-id":${b}}`).ids?.["user-id"], "two ids");
  const huge = "123456789012345678901234567890";
  t.same(idsOf(`{"user-id": ${huge} }`), { ids: { "user-id": huge } }, "30 digits, whitespace around");
});

t.test("numbers against strings: the same text is the same user", async (t) => {
  t.same(idsOf('{"user-id":42}'), idsOf('{"user-id":"42"}'), '42 and "42"');
  t.same(idsOf('{"user-id":42}'), { ids: { "user-id": "42" } });
  t.not(
    idsOf('{"user-id":42}').ids?.["user-id"],
    idsOf('{"user-id":"042"}').ids?.["user-id"],
    '"042" is other text than 42',
  );
  t.same(
    idsOf('{"user-id":"7","project-id":7}'),
    { ids: { "user-id": "7", "project-id": "7" } },
    "each key its own text",
  );
});

t.test("exponents, fractions, negatives: their text, never their value", async (t) => {
  t.same(idsOf('{"user-id":4.2e1}'), { ids: { "user-id": "4.2e1" } }, "an exponent is not 42");
  t.same(idsOf('{"user-id":1E3}'), { ids: { "user-id": "1E3" } }, "1E3 is not 1000");
  t.same(idsOf('{"user-id":1.50}'), { ids: { "user-id": "1.50" } }, "a fraction keeps its trailing zero");
  t.same(idsOf('{"user-id":1e400}'), { ids: { "user-id": "1e400" } }, "beyond a double's range: still its text");
  t.match(
    idsOf('{"user-id":-5}').problem,
    /starts with "-"/,
    "a negative number is an id starting with -: refused like the string",
  );
  t.match(idsOf('{"user-id":-0}').problem, /starts with "-"/);
});

t.test("what JSON refuses, the tag refuses: one problem, no ids", async (t) => {
  for (const text of [
    '{"user-id":007}',
    '{"user-id":+1}',
    '{"user-id":.5}',
    '{"user-id":1.}',
    '{"user-id":0x10}',
    '{"user-id":NaN}',
    '{"user-id":Infinity}',
    '{"user-id":1,}',
    "{'user-id':1}",
  ]) {
    t.match(idsOf(text).problem, /not valid JSON/, text);
  }
});

t.test("duplicate keys: refused, whichever value each reader would keep", async (t) => {
  t.match(idsOf('{"user-id":"1","user-id":"2"}').problem, /key "user-id" written twice/);
  t.match(idsOf('{"user-id":"1","user-id":"1"}').problem, /written twice/, "even with the same value");
  t.match(
    idsOf('{"user-id":"1","user\\u002did":"2"}').problem,
    /key "user-id" written twice/,
    "an escaped spelling of the same key",
  );
  t.match(
    idsOf('{"other":1,"other":2,"user-id":"3"}').problem,
    /key "other" written twice/,
    "any key: the tag is not trusted",
  );
  t.match(
    idsOf('{"user-id":"1","a.user-id":"2"}').problem,
    /conflicting user-id values/,
    "two labels naming the same id key",
  );
});

t.test("unicode escapes: decoded before comparing", async (t) => {
  t.same(idsOf('{"user-id":"\\u0034\\u0032"}'), idsOf('{"user-id":"42"}'), "\\u0034\\u0032 is 42");
  t.same(idsOf('{"\\u0075ser-id":"u_1"}'), { ids: { "user-id": "u_1" } }, "an escaped key");
  t.match(idsOf('{"user-id":"a\\u0020b"}').problem, /whitespace/, "an escaped space is still a space");
  t.match(idsOf('{"user-id":"\\u00e9"}').problem, /user-id/, "non-ASCII refused as an id");
});

t.test("other values are JSON's, nested numbers untouched", async (t) => {
  const read = readLabelsTag(
    { [KEY]: '{"a":[1,{"b":"}"}],"b":{"c":"]"},"t":true,"n":null,"s":"x,y}","user-id":"1","__proto__":"p"}' },
    KEY,
  );
  t.ok(read.found && read.ok);
  if (!read.found || !read.ok) return;
  t.same(read.labels.a, [1, { b: "}" }], "brackets inside strings do not end a value");
  t.same(read.labels.b, { c: "]" });
  t.equal(read.labels.t, true);
  t.equal(read.labels.n, null);
  t.equal(read.labels.s, "x,y}");
  t.equal(Object.getPrototypeOf(read.labels), Object.prototype, "__proto__ is a label, not a prototype");
  t.equal(Object.getOwnPropertyDescriptor(read.labels, "__proto__")?.value, "p");
});

t.test("the member scanner", async (t) => {
  t.same(objectMembers(" { } "), []);
  t.same(objectMembers('{"a" : 1 ,\n"b":"\\"x\\"" }'), [
    { key: "a", source: "1" },
    { key: "b", source: '"\\"x\\""' },
  ]);
  t.throws(() => objectMembers("[1]"), SyntaxError, "not an object");
  t.throws(() => objectMembers('{"a":1'), SyntaxError, "not JSON");
  t.same(["0", "-1", "1e5", '"1"', "true", "[1]"].map(isNumberSource), [true, true, true, false, false, false]);
});
