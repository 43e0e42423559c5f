/**
 * The agent owns only its label prefix: the configuration refuses a prefix that would reach a
 * label osparc (or docker) owns, the writer refuses keys outside the prefix, and the workspace
 * ids of the mounted volume are published under it.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { loadConfig, validateConfig } from "../../src/config/index.ts";
import { ConfigError, ExitCode } from "../../src/errors.ts";
import {
  assertOwnedUpdate,
  LabelError,
  MAX_LABEL_VALUE,
  nodeLabelChanges,
  readinessLabels,
  validateOwnedLabels,
} from "../../src/docker/labels.ts";
import { labelPrefixProblems, OSPARC_LABELS } from "../../src/label-prefix.ts";
import { createLabelWithdrawer, createReporter, type ReporterDeps } from "../../src/docker/readiness-labels.ts";
import { volumeDetails } from "../../src/agent/report.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { Label, MAX_TAG_VALUE, RequestLabel, WORKSPACE_KEYS, workspaceLabel } from "../../src/tags.ts";

const PREFIX = "io.simcore.ebs-cache";

t.test("prefix corpus: accepted prefixes", async (t) => {
  for (const prefix of [
    PREFIX,
    "ebs-cache",
    "io.example.cache",
    "io.simcore.ebs-cache-v2",
    "acme.cache",
    "org.acme.node-cache",
    "io.simcore.cache",
  ]) {
    t.same(validateConfig({ labels: { prefix } }).problems, [], prefix);
  }
});

t.test("prefix corpus: every refused prefix, each with all its problems", async (t) => {
  const corpus: [string, RegExp[]][] = [
    ["", [/must be a label prefix/]],
    ["Bad_Prefix", [/must be a label prefix/]],
    ["io.simcore..x", [/must be a label prefix/]],
    ["a".repeat(129), [/at most 128 characters/]],
    // Docker's reserved namespaces, inside and above.
    ["com.docker.cache", [/lies in com\.docker\.\*, which docker reserves/]],
    ["io.docker", [/lies in io\.docker\.\*, which docker reserves/]],
    ["org.dockerproject.x", [/lies in org\.dockerproject\.\*/]],
    ["com", [/lies above com\.docker\.\*/]],
    ["org", [/lies above org\.dockerproject\.\*/]],
    // Above osparc's labels: the agent would remove them as keys it no longer publishes.
    ["io", [/lies above io\.docker\.\*/, /lies above io\.simcore\.osparc-\*, which osparc's autoscaler reserves/]],
    ["io.simcore", [/lies above io\.simcore\.osparc-\*/]],
    ["io.simcore.osparc", [/lies in io\.simcore\.osparc-\*/]],
    // Equal to one.
    [
      "io.simcore.osparc-services-ready",
      [/lies in io\.simcore\.osparc-\*/, /equals io\.simcore\.osparc-services-ready, a label osparc's autoscaler sets/],
    ],
    ["user-id", [/equals user-id/]],
    ["ec2-instance-type", [/equals ec2-instance-type/]],
    ["wallet-id", [/equals wallet-id/]],
    ["product-name", [/equals product-name/]],
    // Containing one.
    [
      "io.simcore.osparc-node-found-empty.cache",
      [/lies in io\.simcore\.osparc-\*/, /contains io\.simcore\.osparc-node-found-empty/],
    ],
    ["acme.user-id", [/contains user-id/]],
    ["project-id.cache", [/contains project-id/]],
    ["x.node-id.y", [/contains node-id/]],
    // The start of one.
    ["node", [/is the start of node-id/]],
    ["ec2", [/is the start of ec2-instance-type/]],
  ];
  for (const [prefix, expected] of corpus) {
    const { problems, config } = validateConfig({ labels: { prefix } });
    t.equal(problems.length, expected.length, `${JSON.stringify(prefix)}: ${problems.join(" | ")}`);
    expected.forEach((pattern, index) =>
      t.match(problems[index], pattern, `${JSON.stringify(prefix)} problem ${index + 1}`),
    );
    for (const problem of problems) t.match(problem, /^labels\.prefix: /);
    t.equal(config.labels.prefix, PREFIX, "the invalid prefix is not kept");
  }
});

t.test("every osparc label is protected from every kind of prefix that reaches it", async (t) => {
  for (const key of OSPARC_LABELS) {
    t.not(labelPrefixProblems(key).length, 0, `equal: ${key}`);
    t.not(labelPrefixProblems(`acme.${key}`).length, 0, `containing: ${key}`);
    const parent = key.includes(".") ? key.slice(0, key.lastIndexOf(".")) : key.slice(0, key.indexOf("-"));
    t.not(labelPrefixProblems(parent).length, 0, `above: ${parent}`);
  }
});

t.test("labels.protectedKeys: the operator's monitoring labels are protected too", async (t) => {
  const protectedKeys = ["io.example.autoscaled-node", "io.example.gpu-node"];
  t.same(validateConfig({ labels: { prefix: "io.example.cache", protectedKeys } }).problems, []);
  const above = validateConfig({ labels: { prefix: "io.example", protectedKeys } }).problems;
  t.same(above, [
    'labels.prefix: label prefix "io.example" lies above io.example.autoscaled-node, a label another system ' +
      "(labels.protectedKeys) sets",
    'labels.prefix: label prefix "io.example" lies above io.example.gpu-node, a label another system ' +
      "(labels.protectedKeys) sets",
  ]);
  const bad = validateConfig({ labels: { prefix: "io", protectedKeys: ["Not A Key", "io.example.ok"] } }).problems;
  t.match(bad.join("\n"), /labels\.protectedKeys\[0\]: must be a docker label key/);
  t.match(bad.join("\n"), /lies above io\.docker/, "the prefix's own problems are listed with the list's");
  // A prefix refused on its own falls back to the default before the cross-check: its own lines say enough.
  const both = validateConfig({
    labels: { prefix: "acme.user-id", protectedKeys: ["acme.user-id.x", "acme"] },
  }).problems;
  t.same(both, ['labels.prefix: label prefix "acme.user-id" contains user-id, a label osparc\'s autoscaler sets']);
  const cross = validateConfig({
    labels: { prefix: "acme.cache", protectedKeys: ["acme.cache.x", "acme", "acme.cache"] },
  }).problems;
  t.same(cross, [
    'labels.prefix: label prefix "acme.cache" lies above acme.cache.x, a label another system ' +
      "(labels.protectedKeys) sets",
    'labels.prefix: label prefix "acme.cache" contains acme, a label another system (labels.protectedKeys) sets',
    'labels.prefix: label prefix "acme.cache" equals acme.cache, a label another system (labels.protectedKeys) sets',
  ]);
});

t.test("loadConfig: a bad prefix from the file or the environment is exit 3 with every problem", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "labels-config-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const emptyFile = join(dir, "empty.json");
  await writeFile(emptyFile, "{}");
  const error = await loadConfig({
    path: emptyFile,
    env: { EBS_CACHE_AGENT_LABELS__PREFIX: "io.simcore", EBS_CACHE_AGENT_POOL: "a;b" },
  }).catch((e: unknown) => e);
  t.ok(error instanceof ConfigError);
  t.equal((error as ConfigError).exitCode, ExitCode.config);
  t.equal(ExitCode.config, 3);
  const problems = (error as ConfigError).problems;
  t.equal(problems.length, 2, problems.join(" | "));
  t.match(
    problems.join("\n"),
    /EBS_CACHE_AGENT_LABELS__PREFIX \(labels\.prefix\): label prefix "io\.simcore" lies above io\.simcore\.osparc-\*/,
  );
  const cross = await loadConfig({
    path: emptyFile,
    env: {
      EBS_CACHE_AGENT_LABELS__PREFIX: "io.example",
      EBS_CACHE_AGENT_LABELS__PROTECTED_KEYS: "io.example.autoscaled-node",
    },
  }).catch((e: unknown) => e);
  t.same(
    (cross as ConfigError).problems,
    [
      'labels.prefix: label prefix "io.example" lies above io.example.autoscaled-node, a label another system ' +
        "(labels.protectedKeys) sets",
    ],
    "the cross-check runs on the final config, once",
  );
  const fine = await loadConfig({
    path: emptyFile,
    env: { EBS_CACHE_AGENT_LABELS__PROTECTED_KEYS: "io.simcore.autoscaled-node" },
  });
  t.same(fine.config.labels.protectedKeys, ["io.simcore.autoscaled-node"]);
});

t.test("the writer refuses any key outside the prefix", async (t) => {
  t.throws(() => assertOwnedUpdate(PREFIX, { "io.simcore.osparc-services-ready": "true" }, []), LabelError);
  t.throws(
    () => assertOwnedUpdate(PREFIX, {}, ["io.simcore.osparc-services-ready"]),
    /refusing to remove label io\.simcore\.osparc-services-ready/,
  );
  t.throws(() => assertOwnedUpdate(PREFIX, {}, ["user-id"]), LabelError);
  t.throws(() => assertOwnedUpdate(PREFIX, {}, [PREFIX]), LabelError, "the bare prefix is not under it");
  t.throws(
    () => assertOwnedUpdate(PREFIX, {}, [`${PREFIX}x.state`]),
    LabelError,
    "a sibling that shares the text is not under it",
  );
  t.throws(
    () => assertOwnedUpdate("io.simcore", { "io.simcore.state": "ready" }, []),
    LabelError,
    "a prefix above osparc's is refused at write time too",
  );
  t.doesNotThrow(() => assertOwnedUpdate(PREFIX, { [`${PREFIX}.state`]: "ready" }, [`${PREFIX}.pool`]));
  t.throws(() => validateOwnedLabels(PREFIX, { "ec2-instance-type": "m5.large" }), /not under the agent's prefix/);

  const current = {
    "io.simcore.osparc-services-ready": "true",
    "io.simcore.osparc-services-ready-last-changed": "2026-12-01T10:00:00Z",
    "user-id": "42",
    [`${PREFIX}x`]: "other",
    [`${PREFIX}.pool`]: "old",
  };
  t.same(
    nodeLabelChanges(PREFIX, current, {}),
    { add: {}, remove: [`${PREFIX}.pool`] },
    "only the agent's own keys are ever removed",
  );
});

t.test("label values: one printable line of at most MAX_LABEL_VALUE characters", async (t) => {
  t.equal(MAX_LABEL_VALUE, 1024);
  for (const value of ["a\nb", "a\u0000b", "\u0085x", "a\u200bb", "\u202eevil", "x".repeat(MAX_LABEL_VALUE + 1)]) {
    t.throws(() => readinessLabels(PREFIX, "ready", { pool: value }), LabelError, JSON.stringify(value).slice(0, 40));
  }
  t.same(readinessLabels(PREFIX, "ready", { pool: "user_42 é" }), {
    [`${PREFIX}.state`]: "ready",
    [`${PREFIX}.pool`]: "user_42 é",
  });
  t.equal(
    readinessLabels(PREFIX, "ready", { reason: "x".repeat(MAX_LABEL_VALUE) })[`${PREFIX}.reason`]?.length,
    MAX_LABEL_VALUE,
    "the limit itself passes",
  );
  // A tag value (at most EC2's 256 characters) always fits a label: ids and pool names pass both checks.
  t.ok(MAX_TAG_VALUE <= MAX_LABEL_VALUE, "every tag value fits a label value");
  t.ok(
    readinessLabels(
      PREFIX,
      "ready",
      volumeDetails({
        volumeId: "vol-1",
        tags: { "ebs-cache:kind": "workspace", "ebs-cache:user-id": "u".repeat(MAX_TAG_VALUE) },
      }),
    ),
  );
});

t.test("the label names in src/tags.ts are the ones docs/labels.md promises", async (t) => {
  const doc = await readFile(join(import.meta.dirname, "..", "..", "docs", "labels.md"), "utf8");
  const table = doc.slice(doc.indexOf("## Keys and values"), doc.indexOf("Values are one printable line"));
  const documented = new Set([...table.matchAll(/^\| `<prefix>\.([a-z.<>-]+)`/gm)].map((m) => m[1]!));
  t.ok(documented.size >= 8, `the table was read (${[...documented].join(", ")})`);
  t.same(
    [...documented].sort(),
    [...Object.values(Label), "workspace.<key>"].sort(),
    "every documented key has its constant, and no more",
  );
  for (const key of WORKSPACE_KEYS) t.match(table, `\`${key}\``, `${workspaceLabel(key)} is documented`);
  t.same(Object.values(RequestLabel).sort(), ["enabled", "keep"], "the requests osparc's labels tag may carry");
});

t.test("workspace ids of the mounted volume are published under the prefix", async (t) => {
  const workspace = {
    volumeId: "vol-0123456789abcdef0",
    tags: {
      "ebs-cache:managed": "true",
      "ebs-cache:kind": "workspace",
      "ebs-cache:pool": "sim4life",
      "ebs-cache:user-id": "user_42",
      "ebs-cache:project-id": "3fa85f64-5717-4562-b3fc-2c963f66afa6",
      "ebs-cache:product-name": "s4l",
      "ebs-cache:node-id": "",
      "ebs-cache:unrelated": "x",
    },
  };
  t.same(readinessLabels(PREFIX, "ready", volumeDetails(workspace)), {
    [`${PREFIX}.state`]: "ready",
    [`${PREFIX}.volume-id`]: "vol-0123456789abcdef0",
    [`${PREFIX}.pool`]: "sim4life",
    [`${PREFIX}.kind`]: "workspace",
    [`${PREFIX}.workspace.user-id`]: "user_42",
    [`${PREFIX}.workspace.project-id`]: "3fa85f64-5717-4562-b3fc-2c963f66afa6",
    [`${PREFIX}.workspace.product-name`]: "s4l",
  });
  const pool = {
    volumeId: "vol-0aaaaaaaaaaaaaaaa",
    tags: { "ebs-cache:kind": "pool", "ebs-cache:pool": "sim4life", "ebs-cache:user-id": "42" },
  };
  t.same(
    Object.keys(volumeDetails(pool)).filter((key) => key.startsWith("workspace.")),
    [],
    "a pool volume publishes no ids, whatever its tags",
  );
  const injected = {
    volumeId: "vol-0bbbbbbbbbbbbbbbb",
    tags: { "ebs-cache:kind": "workspace", "ebs-cache:user-id": "42\nio.simcore.osparc-services-ready=true" },
  };
  t.throws(
    () => readinessLabels(PREFIX, "ready", volumeDetails(injected)),
    LabelError,
    "an id that is not one line never becomes a label",
  );
});

/** A manager node as the reporter sees it, recording every label update. */
function fakeManager(labels: Record<string, string>) {
  const updates: { add: Record<string, string>; remove: string[] }[] = [];
  const engine = {
    info: async () => ({
      dockerRootDir: "/x",
      driver: "overlay2",
      imageStore: "graphdriver" as const,
      swarm: { nodeId: "node1", controlAvailable: true, state: "active" },
      labels: [],
    }),
    images: async () => [],
    nodeLabels: async () => ({ ...labels }),
    setNodeLabels: async (_node: string, add: Record<string, string>, remove: string[]) => {
      updates.push({ add, remove });
      for (const key of remove) delete labels[key];
      Object.assign(labels, add);
    },
  };
  const engineWrites: Record<string, string>[] = [];
  const daemonConfig = {
    setEngineLabels: async (_prefix: string, written: Record<string, string>) => void engineWrites.push(written),
  };
  return { labels, updates, engineWrites, engine, daemonConfig };
}

t.test("reporter on a manager: osparc's labels survive publication and withdrawal", async (t) => {
  const osparc = {
    "io.simcore.osparc-services-ready": "false",
    "user-id": "user_42",
    "ec2-instance-type": "g4dn.xlarge",
  };
  const node = fakeManager({ ...osparc, [`${PREFIX}.reason`]: "stale" });
  const deps = {
    prefix: PREFIX,
    mode: "auto",
    engine: node.engine,
    daemonConfig: node.daemonConfig,
    docker: undefined,
    log: createMemoryLogger(),
  } as unknown as ReporterDeps;
  const volume = {
    volumeId: "vol-0123456789abcdef0",
    tags: { "ebs-cache:kind": "workspace", "ebs-cache:user-id": "user_42" },
  };
  await createReporter(deps)("ready", volumeDetails(volume));
  t.same(node.labels, {
    ...osparc,
    [`${PREFIX}.state`]: "ready",
    [`${PREFIX}.volume-id`]: "vol-0123456789abcdef0",
    [`${PREFIX}.pool`]: "",
    [`${PREFIX}.kind`]: "workspace",
    [`${PREFIX}.workspace.user-id`]: "user_42",
  });
  await createLabelWithdrawer(deps)({ node: true });
  t.same(node.labels, osparc, "the release withdraws the workspace labels with the others, and only them");
  for (const { add, remove } of node.updates) {
    for (const key of [...Object.keys(add), ...remove]) t.ok(key.startsWith(`${PREFIX}.`), `${key} is the agent's`);
  }
  t.same(node.engineWrites.at(-1), {}, "engine labels cleared too");

  const wrong = { ...deps, prefix: "io.simcore" } as ReporterDeps;
  const before = node.updates.length;
  await t.rejects(createReporter(wrong)("ready", {}), LabelError);
  t.equal(node.updates.length, before, "a prefix above osparc's changes nothing");
});
