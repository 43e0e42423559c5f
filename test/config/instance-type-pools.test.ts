/**
 * Config `instanceTypePools` (src/config/instance-type-pools.ts): a rule's grammar, the glob
 * match on IMDS's instance type, the overlap of two patterns (decided, not guessed: checked
 * against every type of a list), a pool given two sizes, and the pools the keeper stocks. Pure.
 */
import t from "tap";
import {
  globsOverlap,
  instanceTypePoolProblems,
  matchesInstanceType,
  parseInstanceTypePool,
  parseInstanceTypePools,
  ruleForInstanceType,
  stockedPools,
} from "../../src/config/instance-type-pools.ts";
import { validateConfig } from "../../src/config/index.ts";

t.test("a rule: PATTERN=POOL:SIZEGIB", async (t) => {
  t.same(parseInstanceTypePool("g4dn.*=gpu:500"), {
    ok: true,
    rule: { text: "g4dn.*=gpu:500", pattern: "g4dn.*", pool: "gpu", sizeGiB: 500 },
  });
  t.equal(parseInstanceTypePool("u-6tb1.metal=big-1:16384").ok, true, "dashes, the largest EBS volume");
  for (const [text, problem] of [
    ["g4dn.*=gpu", /must be PATTERN=POOL:SIZEGIB/],
    ["g4dn.*:gpu:500", /must be PATTERN=POOL:SIZEGIB/],
    ["G4DN.*=gpu:500", /pattern .* lower case/],
    ["*=gpu:500", /pattern/],
    ["g4dn.?=gpu:500", /pattern/],
    ["g4dn.*=-gpu:500", /the pool of/],
    ["g4dn.*=gpu:0", /from 1 to 16384/],
    ["g4dn.*=gpu:16385", /from 1 to 16384/],
    ["g4dn.*=gpu:1.5", /whole number/],
    ["g4dn.*=gpu:-1", /whole number/],
  ] as const) {
    const parsed = parseInstanceTypePool(text);
    t.match(parsed.ok ? "" : parsed.problem, problem, `${text} refused`);
  }
});

t.test("the match is a glob on the whole instance type", async (t) => {
  t.ok(matchesInstanceType("g4dn.*", "g4dn.8xlarge"));
  t.ok(matchesInstanceType("m5*.large", "m5d.large"));
  t.ok(matchesInstanceType("m5*.large", "m5.large"), "* may be empty");
  t.ok(matchesInstanceType("m5.large", "m5.large"));
  t.notOk(matchesInstanceType("m5.large", "m5.xlarge"), "no pattern: exact");
  t.notOk(matchesInstanceType("g4dn.*", "g4dnx.large"), "the dot is a dot");
  t.notOk(matchesInstanceType("g4dn", "g4dn.xlarge"), "the whole type, not a prefix");
  const rules = parseInstanceTypePools(["g4dn.*=gpu:500", "m5.large=small:100"]);
  t.equal(ruleForInstanceType(rules, "g4dn.8xlarge")?.pool, "gpu");
  t.equal(ruleForInstanceType(rules, "m5.large")?.sizeGiB, 100);
  t.equal(ruleForInstanceType(rules, "t3.medium"), undefined, "no rule: the default pool");
  t.equal(ruleForInstanceType(rules, undefined), undefined, "no instance type read: the default pool");
});

t.test("two patterns overlap exactly when some type matches both", async (t) => {
  const cases: Array<[string, string, boolean]> = [
    ["g4dn.*", "g4dn.8xlarge", true],
    ["g4dn.*", "g5.*", false],
    ["g4dn.*", "*.metal", true],
    ["m5*.large", "m5d.*", true],
    ["m5.*", "m5d.*", false],
    ["*large", "*.xlarge", true],
    ["c6i.large", "c6i.xlarge", false],
    ["a*b", "*c", false],
    ["a*", "*b", true],
    ["x*y*z", "*q*", true],
    ["r6i.*", "r6i.large", true],
  ];
  // What decides it: every pair of the patterns, against the types that could tell (each pattern's
  // `*` filled from a small alphabet). A type that matches both proves the overlap; for the
  // disjoint pairs, none may.
  const fills = ["", ".", "8x", "large", "xlarge", "metal", "d", "b", "c", "q"];
  const instances = (pattern: string): string[] => {
    const parts = pattern.split("*");
    let out = [parts[0]!];
    for (const part of parts.slice(1)) out = out.flatMap((head) => fills.map((f) => head + f + part));
    return out;
  };
  for (const [a, b, expected] of cases) {
    t.equal(globsOverlap(a, b), expected, `${a} vs ${b}`);
    t.equal(globsOverlap(b, a), expected, `${b} vs ${a}`);
    const witness = [...instances(a), ...instances(b)].find(
      (type) => matchesInstanceType(a, type) && matchesInstanceType(b, type),
    );
    if (expected) t.ok(witness, `${a} vs ${b}: a type matches both (${witness})`);
    else t.equal(witness, undefined, `${a} vs ${b}: no tried type matches both`);
  }
});

t.test("the list: overlaps and two sizes of one pool are refused", async (t) => {
  t.same(instanceTypePoolProblems(["g4dn.*=gpu:500", "g5.*=gpu:500", "m5.large=small:100"]), []);
  t.match(instanceTypePoolProblems(["g4dn.*=gpu:500", "g4dn.12xlarge=big:900"]), [
    /"g4dn.\*=gpu:500" and "g4dn.12xlarge=big:900" overlap .* make the patterns disjoint/,
  ]);
  t.match(instanceTypePoolProblems(["g4dn.*=gpu:500", "g5.*=gpu:400"]), [/give pool gpu two sizes/]);
  t.match(instanceTypePoolProblems(["nope"]), [/must be PATTERN=POOL:SIZEGIB/]);
});

t.test("the configuration refuses bad rules, naming the item or the pair", async (t) => {
  t.match(validateConfig({ instanceTypePools: ["g4dn.*=gpu:500", "m5=x:0"] }).problems, [
    /^instanceTypePools\[1\]: the size of "m5=x:0" must be a whole number of GiB from 1 to 16384$/,
  ]);
  t.match(validateConfig({ instanceTypePools: ["g4dn.*=gpu:500", "g4dn.xlarge=small:100"] }).problems, [
    /^instanceTypePools: "g4dn.\*=gpu:500" and "g4dn.xlarge=small:100" overlap/,
  ]);
  t.same(validateConfig({ instanceTypePools: ["g4dn.*=gpu:500"] }).problems, []);
});

t.test("the pools the keeper stocks: pool at its snapshot's size, each rule's at its own", async (t) => {
  t.same(stockedPools("default", []), [{ pool: "default" }]);
  t.same(stockedPools("default", parseInstanceTypePools(["g4dn.*=gpu:500", "g5.*=gpu:500", "m5.*=default:80"])), [
    { pool: "default", sizeGiB: 80 },
    { pool: "gpu", sizeGiB: 500 },
  ]);
});
