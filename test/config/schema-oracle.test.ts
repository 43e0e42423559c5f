/**
 * The shipped JSON Schemas validate the same way outside ECMAScript: every document of a corpus
 * goes through ajv (what the agent and the tests use) and through python's jsonschema (a
 * validator nobody here wrote, with Python's `re`), and the two must agree on each. The corpus:
 * config/config.json, the config tests' valid and invalid documents, edge values generated for
 * every key from the schema itself (newlines, Unicode digits and spaces, control characters,
 * lengths at their bounds), and status and pool documents built by the code with mutations of
 * them. A pattern only one engine reads (`\p{Cc}`, a `$` that Python lets a final newline
 * through) shows here as an error or as a disagreement.
 */
import { readFile } from "node:fs/promises";
import t, { type Test } from "tap";
import { poolReport, poolViewSettingsFrom } from "../../src/agent/pool/summary.ts";
import type { SnapshotInfo, VolumeInfo } from "../../src/agent/ports.ts";
import { defaultConfig, validateConfig } from "../../src/config/index.ts";
import { run } from "../../src/exec.ts";
import { buildStatus } from "../../src/status/document.ts";
import { VolumeTag } from "../../src/tags.ts";
import { DEFAULT_EBS_MODEL_FILE, parseEbsModel } from "../../src/lab/volumes/ebs-model.ts";
import { SCHEMA_FILE } from "../../scripts/config-schema.ts";
import { FULL_CONFIG, INVALID_CONFIGS } from "../fixtures/builders/config-documents.ts";
import {
  DOCUMENT_SCHEMA_FILES,
  documentValidator,
  shippedConfigValidator,
} from "../fixtures/oracles/schema-validators.ts";
import { healthyStatusInputs, readyBootRecord, statusNow } from "../fixtures/builders/status-inputs.ts";

const ORACLE = "test/fixtures/oracles/jsonschema-oracle.py";
/** The python3 on PATH (pyenv's, say), then Debian's, which scripts/setup.sh gives jsonschema. */
const PYTHONS = ["python3", "/usr/bin/python3"];

async function pythonWithJsonschema(): Promise<string> {
  for (const python of PYTHONS) {
    const probe = await run(python, ["-c", "import jsonschema"], { check: false }).catch(() => undefined);
    if (probe?.exitCode === 0) return python;
  }
  throw new Error(
    `no python3 with jsonschema (tried ${PYTHONS.join(", ")}): run scripts/setup.sh (it installs Debian's ` +
      `python3-jsonschema)`,
  );
}
const python = await pythonWithJsonschema();

interface Named {
  name: string;
  document: unknown;
}

interface OracleAnswer {
  jsonschema: string;
  validator: string;
  results: Array<{ valid: boolean; errors: string[] }>;
}

/** Python's verdicts on `documents` against the schema in `file`. */
async function oracle(file: string, documents: readonly Named[]): Promise<OracleAnswer> {
  const schema: unknown = JSON.parse(await readFile(file, "utf8"));
  const input = JSON.stringify({ schema, documents: documents.map((d) => d.document) });
  const answer = await run(python, [ORACLE], { input, check: false });
  if (answer.exitCode !== 0)
    throw new Error(
      `python's jsonschema could not use ${file}: ${answer.stderr.trim().split("\n").slice(-3).join(" | ")}`,
    );
  return JSON.parse(answer.stdout) as OracleAnswer;
}

type AjvValidate = ((document: unknown) => boolean) & { errors?: unknown };

/** Both validators over `documents`: ajv's verdicts, and one assertion that python agrees on each. */
async function compare(
  t: Test,
  file: string,
  validate: AjvValidate,
  documents: readonly Named[],
): Promise<Map<string, boolean>> {
  const answer = await oracle(file, documents);
  t.equal(
    answer.results.length,
    documents.length,
    `jsonschema ${answer.jsonschema} (${answer.validator}) answered for every document of ${file}`,
  );
  const verdicts = new Map<string, boolean>();
  const disagreements: string[] = [];
  for (const [i, { name, document }] of documents.entries()) {
    const ajv = validate(document);
    const py = answer.results[i]!;
    verdicts.set(name, ajv);
    if (ajv !== py.valid) {
      disagreements.push(
        `${name}: ajv says ${ajv ? "valid" : `invalid (${JSON.stringify(validate.errors)})`}, jsonschema says ` +
          `${py.valid ? "valid" : `invalid (${py.errors.join("; ")})`}`,
      );
    }
  }
  t.same(disagreements, [], `ajv and python's jsonschema agree on all ${documents.length} documents of ${file}`);
  return verdicts;
}

// ---- the configuration: the edge values of every key, from the shipped schema ----

interface SchemaNode {
  type?: string | string[];
  properties?: Record<string, SchemaNode>;
  items?: SchemaNode;
  enum?: string[];
  minimum?: number;
  maximum?: number;
  pattern?: string;
  "x-format"?: string;
}

/** The keys (leaves) of the schema, by their path. */
function leaves(node: SchemaNode, segments: string[] = []): Array<{ segments: string[]; node: SchemaNode }> {
  if (node.type === "object" && node.properties)
    return Object.entries(node.properties).flatMap(([name, child]) => leaves(child, [...segments, name]));
  return [{ segments, node }];
}

const at = (object: unknown, segments: readonly string[]): unknown =>
  segments.reduce<unknown>(
    (value, key) => (value !== null && typeof value === "object" ? (value as Record<string, unknown>)[key] : undefined),
    object,
  );

const nested = (segments: readonly string[], value: unknown): unknown =>
  segments.reduceRight<unknown>((inner, key) => ({ [key]: inner }), value);

/** Where engines differ: line ends and terminators, Unicode spaces and digits, C0/C1 controls, astral characters. */
function stringEdges(base: string): string[] {
  const suffixes = [
    "\n",
    "\r",
    "\r\n",
    "\u2028",
    "\u0085",
    "\u00a0",
    "\ufeff",
    "\u001c",
    "\t",
    " ",
    "\u0000",
    "\u007f",
    "\u009f",
    "\u00e9",
    "\u{1F600}",
  ];
  return [
    base,
    "",
    "\n" + base,
    ...suffixes.map((suffix) => base + suffix),
    base.replace(/[0-9]/g, "\u0661"),
    base.replace(/[0-9]/g, "\uff11"),
    base.toUpperCase(),
  ];
}

/** Values at a format's length bounds, and its own traps. */
const FORMAT_EDGES: Record<string, string[]> = {
  poolName: ["p".repeat(63), "p".repeat(64)],
  imageSet: ["s".repeat(256), "s".repeat(257)],
  imageRef: ["r".repeat(255), "r".repeat(256)],
  systemdUnit: ["u".repeat(247) + ".service", "u".repeat(248) + ".service", ".service", "a.service\n"],
  labelKey: ["k".repeat(256), "k".repeat(257), "k", "k-", "-k"],
  labelPrefix: ["a.b-c", "a..b", "a.", "A"],
  tagKey: [
    "t".repeat(128),
    "t".repeat(129),
    "\u{1F600}".repeat(128),
    "\u{1F600}".repeat(129),
    "aws:x",
    "AWS:x",
    "aws",
    "x\u0080",
    "x\u00a0",
    "\u0085",
  ],
  region: ["us-east-1", "us-east-12", "us-east-123", "us-gov-west-1"],
  availabilityZone: ["us-east-1a", "us-east-1", "us-east-1ab"],
  url: ["http://x", "https://x/y?z=1", "http://", "http://x y", "http://x\u3000", "http://x\u180e"],
  device: ["/dev/sdf", "/dev/sdq", "/dev/xvdp"],
};

function keyEdges(node: SchemaNode, sample: unknown): unknown[] {
  const types = Array.isArray(node.type) ? node.type : [node.type];
  const values: unknown[] = [null, true, "1", [], {}];
  if (types.includes("boolean")) values.push(false, 1, "true");
  if (types.includes("number") || types.includes("integer")) {
    const { minimum = 0, maximum = 100 } = node;
    values.push(minimum, maximum, minimum - 1, maximum + 1, minimum + 0.5, maximum - 0.5, 1e308);
  }
  if (node.enum) values.push(...node.enum, ...node.enum.map((value) => value.toUpperCase()), "");
  const strings = [
    ...(typeof sample === "string" ? stringEdges(sample) : []),
    ...(FORMAT_EDGES[node["x-format"] ?? ""] ?? []),
  ];
  if (types.includes("string")) values.push(...strings);
  if (types.includes("array") && node.items) {
    const item = Array.isArray(sample) && typeof sample[0] === "string" ? sample[0] : undefined;
    const itemStrings = [
      ...(item !== undefined ? stringEdges(item) : []),
      ...(FORMAT_EDGES[node.items["x-format"] ?? ""] ?? []),
      ...(node.items.enum ?? []),
    ];
    values.push(sample, [1], ["a", 2], ...itemStrings.map((value) => [value]));
  }
  return values;
}

async function configCorpus(): Promise<{
  valid: Named[];
  invalid: Array<Named & { schema: boolean }>;
  generated: Named[];
}> {
  const shipped = JSON.parse(await readFile(SCHEMA_FILE, "utf8")) as SchemaNode;
  const valid: Named[] = [
    { name: "config/config.json", document: JSON.parse(await readFile("config/config.json", "utf8")) },
    { name: "{}", document: {} },
    { name: "the defaults", document: defaultConfig() },
    { name: "every key set (FULL_CONFIG)", document: FULL_CONFIG },
  ];
  const invalid = Object.entries(INVALID_CONFIGS).map(([name, { document, schema }]) => ({
    name: `invalid: ${name}`,
    document,
    schema,
  }));
  const generated: Named[] = [];
  for (const { segments, node } of leaves(shipped)) {
    const sample =
      segments[0] === "$schema" ? "./config.schema.json" : (at(FULL_CONFIG, segments) ?? at(defaultConfig(), segments));
    for (const [i, value] of keyEdges(node, sample).entries()) {
      generated.push({
        name: `${segments.join(".")} #${i} = ${JSON.stringify(value)?.slice(0, 60)}`,
        document: nested(segments, value),
      });
    }
  }
  return { valid, invalid, generated };
}

t.test("config/config.schema.json: ajv and python's jsonschema agree on every document", async (t) => {
  const { valid, invalid, generated } = await configCorpus();
  const verdicts = await compare(t, SCHEMA_FILE, await shippedConfigValidator(), [...valid, ...invalid, ...generated]);

  for (const { name } of valid) t.equal(verdicts.get(name), true, `${name} is valid`);
  for (const { name, document, schema } of invalid) {
    t.ok(validateConfig(document).problems.length > 0, `${name}: the agent refuses it`);
    t.equal(
      verdicts.get(name),
      !schema,
      `${name}: ${schema ? "the schema refuses it too" : "only the agent's code sees its problem"}`,
    );
  }
  const outcomes = [...generated].map(({ name }) => verdicts.get(name));
  t.ok(
    outcomes.includes(true) && outcomes.includes(false),
    `the generated edges (${generated.length}) hold valid and invalid documents`,
  );
  const verdictOf = (document: unknown) =>
    verdicts.get(generated.find((g) => JSON.stringify(g.document) === JSON.stringify(document))?.name ?? "");
  // The cases that told the engines apart before the patterns kept to what both read alike.
  t.equal(verdictOf({ pool: "gpu-2024.1\n" }), false, "a final newline is refused (Python's $ alone lets it through)");
  t.equal(verdictOf({ region: "eu-central-\u0661" }), false, "a Unicode digit is no [0-9] (Python's \\d takes it)");
  t.equal(
    verdictOf({ workspace: { labelsTag: "my.labels\u0085" } }),
    false,
    "a C1 control character is refused in a tag key (\\p{Cc}, spelled out)",
  );
  t.equal(
    verdictOf({ workspace: { labelsTag: "my.labels\u00a0" } }),
    true,
    "a no-break space is a printable tag key character",
  );
  t.equal(
    verdictOf({ workspace: { labelsTag: "\u{1F600}".repeat(128) } }),
    true,
    "128 astral characters are 128 characters",
  );
  t.equal(
    verdictOf({ docker: { unit: "u".repeat(248) + ".service" } }),
    false,
    "a unit name of 256 characters is refused",
  );
  t.equal(
    verdictOf({ ec2Endpoint: "http://127.0.0.1:4566\ufeff" }),
    false,
    "ECMAScript's whitespace (a BOM) ends a URL",
  );
});

// ---- the documents: `status --json` and `pool --json` ----

function statusCorpus(): Named[] {
  const healthy = JSON.parse(JSON.stringify(buildStatus(healthyStatusInputs))) as Record<string, unknown>;
  const volume = healthy.volume as Record<string, unknown>;
  const degraded = {
    ...readyBootRecord,
    result: {
      outcome: "degraded" as const,
      source: "degraded" as const,
      reason: "no pool volume",
      timeline: [{ step: "claim-volume", ms: 10 }],
    },
  };
  const built = [
    { name: "a healthy host", document: healthy },
    { name: "no boot recorded", document: buildStatus({ now: statusNow }) },
    { name: "a degraded boot", document: buildStatus({ now: statusNow, boot: degraded }) },
    { name: "not mounted", document: buildStatus({ ...healthyStatusInputs, filesystem: undefined }) },
  ];
  const { prewarm: _dropped, ...withoutPrewarm } = healthy;
  const mutated = [
    { name: "healthy is a string", document: { ...healthy, healthy: "yes" } },
    { name: "an unknown field", document: { ...healthy, extra: 1 } },
    { name: "a part missing", document: withoutPrewarm },
    { name: "a volume id of another shape", document: { ...healthy, volume: { ...volume, volumeId: "vol-XYZ" } } },
    {
      name: "a volume id with a final newline",
      document: { ...healthy, volume: { ...volume, volumeId: `${String(volume.volumeId)}\n` } },
    },
    { name: "a time that is no time", document: { ...healthy, generatedAt: "yesterday" } },
    { name: "a time with a final newline", document: { ...healthy, generatedAt: `${String(healthy.generatedAt)}\n` } },
    {
      name: "a time in Unicode digits",
      document: { ...healthy, generatedAt: String(healthy.generatedAt).replace(/[0-9]/g, "\u0661") },
    },
  ];
  return [...built.map((b) => ({ ...b, document: JSON.parse(JSON.stringify(b.document)) as unknown })), ...mutated];
}

function poolCorpus(): Named[] {
  const settings = poolViewSettingsFrom(
    { ...defaultConfig(), pool: "p", keeper: { ...defaultConfig().keeper, zones: ["eu-west-1a", "eu-west-1b"] } },
    undefined,
  );
  const tags = {
    [VolumeTag.managed]: "true",
    [VolumeTag.kind]: "pool",
    [VolumeTag.pool]: "p",
    [VolumeTag.imageSet]: "set",
  };
  const snapshots: SnapshotInfo[] = [
    {
      snapshotId: "snap-1",
      state: "completed",
      startTime: statusNow,
      volumeSizeGiB: 10,
      tags: { ...tags, [VolumeTag.builtAt]: statusNow.toISOString() },
    },
  ];
  const volumes: VolumeInfo[] = [
    {
      volumeId: "vol-00000001",
      availabilityZone: "eu-west-1a",
      state: "available",
      sizeGiB: 10,
      snapshotId: "snap-1",
      volumeType: "gp3",
      iops: 3000,
      throughputMiBps: 125,
      tags,
    },
    {
      volumeId: "vol-0123456789abcdef0",
      availabilityZone: "eu-west-1b",
      state: "in-use",
      sizeGiB: 20,
      snapshotId: "snap-gone",
      tags: { ...tags, [VolumeTag.lastError]: "i-9: no device", [VolumeTag.lastErrorAt]: statusNow.toISOString() },
      attachment: { instanceId: "i-1", device: "/dev/sdf", state: "attached" },
    },
  ];
  const report = JSON.parse(JSON.stringify(poolReport({ volumes, snapshots }, settings, statusNow))) as Record<
    string,
    unknown
  >;
  const empty = JSON.parse(
    JSON.stringify(poolReport({ volumes: [], snapshots: [] }, { ...settings, keeper: null }, statusNow)),
  ) as unknown;
  return [
    { name: "a pool with a keeper, a quarantined volume and one of no known generation", document: report },
    { name: "nothing at all", document: empty },
    { name: "an unknown key", document: { ...report, extra: 1 } },
    { name: "a time with a final newline", document: { ...report, generatedAt: `${String(report.generatedAt)}\n` } },
    {
      name: "a time in fullwidth digits",
      document: { ...report, generatedAt: String(report.generatedAt).replace(/[0-9]/g, "\uff11") },
    },
  ];
}

t.test("schema/status.schema.json and schema/pool.schema.json: ajv and python's jsonschema agree", async (t) => {
  for (const [kind, corpus] of [
    ["status", statusCorpus()],
    ["pool", poolCorpus()],
  ] as const) {
    const file = DOCUMENT_SCHEMA_FILES[kind];
    const verdicts = await compare(t, file, await documentValidator(file), corpus);
    const built = kind === "status" ? 4 : 2;
    for (const [i, { name }] of corpus.entries())
      t.equal(verdicts.get(name), i < built, `${kind}: ${name} is ${i < built ? "valid" : "invalid"}`);
  }
});

/** The lab's assumed model and a measured one, then mutations: the first two are valid. */
async function ebsModelCorpus(): Promise<Named[]> {
  const assumed = JSON.parse(await readFile(DEFAULT_EBS_MODEL_FILE, "utf8")) as Record<string, unknown>;
  const { $comment: _note, blockKiB: _block, ...bare } = assumed;
  const measured = {
    ...bare,
    origin: "measured",
    source: "acceptance run",
    instanceType: "c7gd.2xlarge",
    region: "eu-central-2",
    date: "2026-12-05T09:14:03.120Z",
    attachSeconds: 6,
    firstReadLatencyMs: { qd1: 11.5, qd8: 13, qd32: 41.25 },
    concurrency: 16,
    warmThroughputMiBps: 1000,
  };
  const latency = assumed.firstReadLatencyMs as Record<string, unknown>;
  const { qd32: _deepest, ...twoDepths } = latency;
  const { source: _source, ...noSource } = assumed;
  return [
    { name: "the lab's assumed model", document: assumed },
    { name: "a measured one, no block size", document: measured },
    { name: "an unknown key", document: { ...assumed, iops: 3000 } },
    { name: "an unknown depth", document: { ...assumed, firstReadLatencyMs: { ...latency, qd64: 1 } } },
    { name: "a depth missing", document: { ...assumed, firstReadLatencyMs: twoDepths } },
    { name: "no source", document: noSource },
    { name: "an empty source", document: { ...assumed, source: "" } },
    { name: "another origin", document: { ...assumed, origin: "guessed" } },
    { name: "schemaVersion 2", document: { ...assumed, schemaVersion: 2 } },
    { name: "a fractional concurrency", document: { ...assumed, concurrency: 2.5 } },
    { name: "no concurrency at all", document: { ...assumed, concurrency: 0 } },
    { name: "a warm throughput of 0", document: { ...assumed, warmThroughputMiBps: 0 } },
    { name: "a negative latency", document: { ...assumed, firstReadLatencyMs: { ...latency, qd8: -1 } } },
    { name: "a latency as a string", document: { ...assumed, firstReadLatencyMs: { ...latency, qd1: "40" } } },
    { name: "an attach of two hours", document: { ...assumed, attachSeconds: 7200 } },
    { name: "a block not of 4 KiB", document: { ...assumed, blockKiB: 510 } },
    { name: "a region with a final newline", document: { ...assumed, region: "eu-west-1\n" } },
    { name: "a zone for a region", document: { ...assumed, region: "eu-west-1a" } },
    { name: "an instance type without its size", document: { ...assumed, instanceType: "m6i" } },
    { name: "a date in fullwidth digits", document: { ...assumed, date: "\uff12026-12-06" } },
    { name: "a date with a final newline", document: { ...assumed, date: "2026-12-06\n" } },
    { name: "a list", document: [assumed] },
  ];
}

t.test("schema/ebs-model.schema.json: ajv, python's jsonschema and the lab's parser agree", async (t) => {
  const file = DOCUMENT_SCHEMA_FILES.ebsModel;
  const corpus = await ebsModelCorpus();
  const verdicts = await compare(t, file, await documentValidator(file), corpus);
  for (const [i, { name, document }] of corpus.entries()) {
    t.equal(verdicts.get(name), i < 2, `${name} is ${i < 2 ? "valid" : "invalid"}`);
    let parsed = true;
    try {
      parseEbsModel(document, "model.json");
    } catch (error) {
      parsed = false;
      t.match((error as Error).message, /^model\.json: not an EBS model: [^\n]+$/, `${name}: one line naming the file`);
    }
    t.equal(parsed, i < 2, `the parser ${i < 2 ? "takes" : "refuses"} ${name}`);
  }
});

t.test("the oracle itself refuses what only ECMAScript reads (so the agreement above means something)", async (t) => {
  const file = "test/fixtures/oracles/jsonschema-oracle.py";
  const schema = { $schema: "https://json-schema.org/draft/2020-12/schema", type: "string", pattern: "^[^\\p{Cc}]+$" };
  const answer = await run(python, [file], { input: JSON.stringify({ schema, documents: ["x"] }), check: false });
  t.not(answer.exitCode, 0, "a \\p{…} pattern does not compile in Python's re");
  const end = await run(python, [file], {
    input: JSON.stringify({ schema: { type: "string", pattern: "^[a-z]+$" }, documents: ["abc\n"] }),
  });
  t.equal(
    (JSON.parse(end.stdout) as OracleAnswer).results[0]?.valid,
    true,
    "and a bare $ lets a final newline through there, as the patterns now keep from",
  );
});
