import { readFile } from "node:fs/promises";
import { join } from "node:path";
import t from "tap";
import { generate } from "../../scripts/config-schema.ts";
import { shippedConfigValidator } from "../fixtures/oracles/schema-validators.ts";
import { FULL_CONFIG as FULL, INVALID_CONFIGS } from "../fixtures/builders/config-documents.ts";
import { MAX_OPERATOR_TAGS, VolumeTag, WORKSPACE_KEYS } from "../../src/tags.ts";
import { CONFIG_SCHEMA } from "../../src/config/schema.ts";
import { ConfigError } from "../../src/errors.ts";
import {
  CONFIG_KEYS,
  applyEnvOverrides,
  applyInstanceTags,
  defaultConfig,
  loadConfig,
  parseConfigText,
  readConfigFile,
  validateConfig,
  type AgentConfig,
} from "../../src/config/index.ts";

const DEFAULTS = {
  enabled: true,
  pool: "default",
  imageSet: null,
  instanceTypePools: [],
  region: null,
  ec2Endpoint: null,
  imdsEndpoint: null,
  device: "/dev/sdf",
  volumeType: "gp3",
  createFromSnapshot: true,
  initializationRateMiBps: null,
  volumes: { encrypted: false, kmsKeyId: null, iops: null, throughputMiBps: null, tags: [] },
  claim: { candidatesPerListing: 50, maxVolumes: 3, maxLosses: 5, quarantineHours: 6 },
  timeouts: {
    imdsSeconds: 60,
    imdsRequestSeconds: 5,
    attachSeconds: 120,
    deviceSeconds: 60,
    mountHolderSeconds: 10,
    dockerSeconds: 120,
    bootSeconds: 40,
    startLimitSeconds: 0,
    joinMarginSeconds: 20,
    createSeconds: 20,
  },
  paths: {
    byIdDir: "/dev/disk/by-id",
    sysfsRoot: "/sys",
    mountRoot: "/var/lib/ebs-cache",
    daemonJson: "/etc/docker/daemon.json",
    containerdConfig: "/etc/containerd/config.toml",
    dockerHost: "unix:///var/run/docker.sock",
    stateDir: "/var/lib/ebs-cache-agent",
    unitsDir: "/etc/systemd/system",
    systemdRunDir: "/run/systemd/system",
  },
  docker: { control: "systemd", unit: "docker.service", expectedImages: [] },
  labels: { prefix: "io.simcore.ebs-cache", mode: "auto", protectedKeys: [] },
  release: { stopDocker: true },
  ttlHours: 24,
  workspace: {
    labelsTag: "io.simcore.autoscaling.ec2_instance.docker_node_labels",
    idKeys: ["user-id", "project-id", "node-id"],
    minimumKeys: ["user-id"],
    create: "snapshot",
    sizeGiB: 20,
    requireEncrypted: false,
    waitForLabelsTag: "warm-buffer",
    waitForLabelsTagSeconds: 15,
  },
  prewarm: {
    strategy: "check",
    background: true,
    check: { seconds: 5, reads: 2000, ioDepth: 16 },
    thresholds: { minIops: 1000, maxMedianLatencyMs: 20 },
    initialize: { ioDepth: 32, maxIoKiB: 1024, timeoutMinutes: null, progressSeconds: 10 },
    giveWay: { enabled: true, runMs: 250, pauseMs: 100, maxPausedMs: 5000, settleMs: 1000, othersIops: 0 },
  },
  keeper: {
    zones: [],
    minAvailable: 2,
    maxAvailable: 4,
    maxVolumes: 20,
    maxGiB: 2000,
    initializationRateMiBps: 100,
    reclaimStoppedAfterDays: null,
  },
  cost: { gibMonthUsd: 0.08, iopsMonthUsd: 0.005, throughputMonthUsd: 0.04, snapshotGibMonthUsd: 0.05 },
  refresh: {
    enabled: false,
    concurrency: 1,
    pullSeconds: 1800,
    prePulledImagesTag: "io.simcore.autoscaling.pre_pulled_images",
  },
  gc: { supersededGraceHours: 24 },
  prune: { afterBoot: true, periodic: true, thresholdPercent: 85, targetPercent: 75 },
  metrics: { textfileDir: "/var/lib/prometheus/node-exporter" },
  logLevel: "info",
};

t.test("defaults: no file, an empty object and defaultConfig() agree", async (t) => {
  t.same(defaultConfig(), DEFAULTS);
  t.same(validateConfig(undefined), { config: DEFAULTS, problems: [], warnings: [] });
  t.same(validateConfig({}), { config: DEFAULTS, problems: [], warnings: [] });
  const a = defaultConfig();
  (a.docker.expectedImages as string[]).push("x");
  t.same(defaultConfig().docker.expectedImages, [], "defaults are fresh copies");
});

t.test("a full valid file is taken as written", async (t) => {
  const result = validateConfig(FULL);
  t.same(result.problems, []);
  t.same(result.config, FULL);
  t.same(
    validateConfig({ timeouts: { deviceSeconds: 5 } }).config.timeouts,
    { ...DEFAULTS.timeouts, deviceSeconds: 5 },
    "a partial group keeps the other defaults",
  );
});

t.test("every problem of a file is reported at once, each naming its JSON path", async (t) => {
  const { problems, config } = validateConfig(INVALID_CONFIGS.everyProblemAtOnce.document);
  t.same(problems.sort(), [
    'device: must be a device name matching ^/dev/(sd[f-p]|xvd[f-p])$, got "/dev/sda"',
    'docker.control: must be one of "systemd", "none", got "systemctl"',
    'docker.expectedImages[1]: image reference "$(reboot)" contains the shell metacharacter "$"',
    "docker.expectedImages[2]: must be a string, got 3",
    'docker.unit: must be a systemd service name such as docker.service, got "docker; reboot"',
    'ec2Endpoint: must be an http:// or https:// URL, got "ftp://x"',
    'enabled: must be a boolean (true or false), got "yes"',
    "initializationRateMiBps: must be an integer between 100 and 300, or null, got 99",
    'labels.mode: must be one of "auto", "node", "engine", "off", got "swarm"',
    'labels.prefix: must be a label prefix matching ^[a-z0-9]+([.-][a-z0-9]+)*$, got "Bad_Prefix"',
    'logLevel: must be one of "error", "warning", "notice", "info", "debug", got "verbose"',
    'paths.daemonJson: "/etc/../etc/docker/daemon.json" has a ".." segment; write the path without it',
    'paths.dockerHost: must be unix:// followed by an absolute socket path, got "tcp://1.2.3.4:2375"',
    "paths.mountRoot: must be an absolute path without '..' segments, got \"relative/dir\"",
    'pool: pool name "a;b" contains the shell metacharacter ";"',
    'region: must be an AWS region name such as us-east-1, got "moon"',
    "timeouts.attachSeconds: must be a number between 1 and 3600, got 0",
    'timeouts.deviceSeconds: must be a number between 1 and 3600, got "x"',
    "ttlHours: must be a number between 1 and 8760, got 0",
    'volumeType: must be one of "gp2", "gp3", "io1", "io2", "st1", "sc1", "standard", got "gp4"',
    "workspace: must be a JSON object, got an array",
  ]);
  t.same(config, DEFAULTS, "invalid values fall back to their defaults in the returned config");
});

t.test("wrong shapes", async (t) => {
  t.same(validateConfig([]).problems, ["the configuration: must be a JSON object, got an array"]);
  t.same(validateConfig("x").problems, ['the configuration: must be a JSON object, got "x"']);
  t.same(validateConfig({ timeouts: null }).problems, ["timeouts: must be a JSON object, got null"]);
  t.same(validateConfig({ pool: null }).problems, [
    "pool: must be a pool name (letters, digits, '.', '_', '-', starting with a letter or digit, at most 63 " +
      "characters), got null",
  ]);
  t.same(validateConfig({ region: null, imageSet: null }).problems, [], "null is allowed where the key is nullable");
  t.same(
    validateConfig({ metrics: { textfileDir: null } }).config.metrics,
    { textfileDir: null },
    "null writes no metrics",
  );
  t.same(validateConfig({ metrics: { textfileDir: "node-exporter" } }).problems, [
    "metrics.textfileDir: must be an absolute path without '..' segments, got \"node-exporter\"",
  ]);
  t.same(validateConfig({ docker: { expectedImages: "nginx" } }).problems, [
    "docker.expectedImages: must be a list of strings, each a Docker image reference (registry[:port]/path:tag " +
      'or @sha256:…), got "nginx"',
  ]);
  t.same(validateConfig({ workspace: { sizeGiB: 1.5 } }).problems, [
    "workspace.sizeGiB: must be an integer between 1 and 16384, got 1.5",
  ]);
});

t.test("unknown keys are errors, with a suggestion when one is close", async (t) => {
  t.same(validateConfig({ pools: "x" }).problems, ['pools: unknown key (did you mean "pool"?)']);
  t.same(validateConfig({ timeouts: { deviceSecond: 5 } }).problems, [
    'timeouts.deviceSecond: unknown key (did you mean "timeouts.deviceSeconds"?)',
  ]);
  t.same(validateConfig({ ttl_hours: 5 }).problems, ['ttl_hours: unknown key (did you mean "ttlHours"?)']);
  t.same(validateConfig({ LOGLEVEL: "info" }).problems, ['LOGLEVEL: unknown key (did you mean "logLevel"?)']);
  t.same(
    validateConfig({ deviceSeconds: 5 }).problems,
    ['deviceSeconds: unknown key (did you mean "timeouts.deviceSeconds"?)'],
    "a key at the wrong level",
  );
  t.same(validateConfig({ docker: { expected_images: [] } }).problems, [
    'docker.expected_images: unknown key (did you mean "docker.expectedImages"?)',
  ]);
  t.same(validateConfig({ timeouts: { zzz: 1 } }).problems, [
    "timeouts.zzz: unknown key (keys of timeouts: imdsSeconds, imdsRequestSeconds, attachSeconds, deviceSeconds, " +
      "mountHolderSeconds, " +
      "dockerSeconds, bootSeconds, startLimitSeconds, joinMarginSeconds, createSeconds)",
  ]);
  t.match(validateConfig({ __proto__x: 1 }).problems[0], /^__proto__x: unknown key \(top-level keys: enabled, pool, /);
  t.same(
    validateConfig(JSON.parse('{"__proto__": {"enabled": false}}')).problems.length,
    1,
    "__proto__ is just an unknown key",
  );
  const both = validateConfig({ pools: 1, pool: "a b" }).problems;
  t.equal(both.length, 2, "unknown keys and bad values together");
});

t.test("workspace keys: osparc's placement label keys only, the minimum among them", async (t) => {
  t.same(validateConfig({ workspace: { idKeys: ["user-id", "userid", "io.simcore.user-id"] } }).problems, [
    "workspace.idKeys[1]: must be one of osparc's placement label keys: product-name, wallet-id, user-id, " +
      'project-id, node-id, got "userid"',
    "workspace.idKeys[2]: must be one of osparc's placement label keys: product-name, wallet-id, user-id, " +
      'project-id, node-id, got "io.simcore.user-id"',
  ]);
  t.same(
    validateConfig({ workspace: { idKeys: ["project-id", "node-id"] } }).problems,
    [
      'workspace.minimumKeys: "user-id" not in workspace.idKeys, so no workspace could ever be used; add it to ' +
        "idKeys or remove it",
    ],
    "the default minimum must stay among the keys",
  );
  t.same(
    validateConfig({ workspace: { idKeys: ["project-id", "node-id"], minimumKeys: ["project-id"] } }).problems,
    [],
  );
  t.same(validateConfig({ workspace: { idKeys: [], minimumKeys: [] } }).problems, [], "no keys: workspaces off");
  const dir = t.testdir({ "c.json": "{}" });
  const fromEnv = await loadConfig({
    path: join(dir, "c.json"),
    env: {
      EBS_CACHE_AGENT_WORKSPACE__ID_KEYS: "user-id, wallet-id",
      EBS_CACHE_AGENT_WORKSPACE__MINIMUM_KEYS: "wallet-id,user-id",
    },
  });
  t.same(
    [fromEnv.config.workspace.idKeys, fromEnv.config.workspace.minimumKeys],
    [
      ["user-id", "wallet-id"],
      ["wallet-id", "user-id"],
    ],
    "comma lists from the environment",
  );
  const envBad = await loadConfig({
    path: join(dir, "c.json"),
    env: { EBS_CACHE_AGENT_WORKSPACE__ID_KEYS: "project-id" },
  }).catch((e: unknown) => e);
  t.ok(envBad instanceof ConfigError, "the environment's keys are cross-checked too");
  t.match((envBad as ConfigError).problems, [/workspace\.minimumKeys: "user-id" not in workspace\.idKeys/]);
});

t.test("keeper: zone names are checked, the lower bound may not exceed the upper", async (t) => {
  t.same(validateConfig({ keeper: { zones: ["eu-central-1a", "eu-central-1", "a;b"] } }).problems, [
    'keeper.zones[1]: must be an availability zone name such as us-east-1a, got "eu-central-1"',
    'keeper.zones[2]: must be an availability zone name such as us-east-1a, got "a;b"',
  ]);
  t.same(validateConfig({ keeper: { minAvailable: 5, maxAvailable: 3 } }).problems, [
    "keeper.maxAvailable: 3 is below keeper.minAvailable (5), so the keeper would create volumes and delete them " +
      "again; raise it or lower minAvailable",
  ]);
  t.same(
    validateConfig({ keeper: { minAvailable: 3, maxAvailable: 3 } }).problems,
    [],
    "equal bounds are a fixed target",
  );
  t.same(validateConfig({ keeper: { initializationRateMiBps: 301 } }).problems, [
    "keeper.initializationRateMiBps: must be an integer between 100 and 300, or null, got 301",
  ]);
});

t.test("volumes: encryption, gp3 performance and operator tags within EC2's rules, reported at once", async (t) => {
  const good = validateConfig({
    volumes: {
      encrypted: true,
      kmsKeyId: "alias/ebs-cache",
      iops: 6000,
      throughputMiBps: 500,
      tags: ["CostCenter=1234", "Owner=team a", "Empty="],
    },
    workspace: { requireEncrypted: true },
  });
  t.same(good.problems, [], "a valid volumes group");
  t.same(good.config.volumes.tags, ["CostCenter=1234", "Owner=team a", "Empty="]);
  for (const key of [
    "1234abcd-12ab-34cd-56ef-1234567890ab",
    "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    "arn:aws:kms:eu-west-1:111122223333:alias/ebs",
    "mrk-1234abcd12ab34cd56ef1234567890ab",
  ]) {
    t.same(validateConfig({ volumes: { encrypted: true, kmsKeyId: key } }).problems, [], `KMS key ${key}`);
  }
  t.match(
    validateConfig({
      volumeType: "gp2",
      volumes: {
        kmsKeyId: "1234",
        iops: 2000,
        throughputMiBps: 3000,
        tags: ["aws:owner=x", "ebs-cache:pool=y", "noequals", `${"k".repeat(129)}=v`, `Long=${"v".repeat(257)}`],
      },
    }).problems,
    [
      "volumes.kmsKeyId: must be a KMS key: a key id (1234abcd-12ab-34cd-56ef-1234567890ab), alias/NAME, a key " +
        'ARN or an alias ARN, got "1234"',
      "volumes.iops: must be an integer between 3000 and 80000, or null, got 2000",
      "volumes.throughputMiBps: must be an integer between 125 and 2000, or null, got 3000",
      'volumes.tags[0]: the key of "aws:owner=x" starts with aws:, which EC2 reserves for AWS\'s own tags',
      'volumes.tags[1]: the key of "ebs-cache:pool=y" is in the agent\'s own ebs-cache: namespace: choose another key',
      'volumes.tags[2]: must be KEY=VALUE, got "noequals"',
      /^volumes\.tags\[3\]: the key of "k+\.\.\." must be 1 to 128 characters \(EC2's limit\)$/,
      /^volumes\.tags\[4\]: the value of "Long=v+\.\.\." is longer than 256 characters \(EC2's limit\)$/,
    ],
    "every bad value at once, each naming its key",
  );
  t.same(
    validateConfig({
      volumeType: "gp2",
      volumes: { kmsKeyId: "alias/x", iops: 4000, throughputMiBps: 1001, tags: ["A=1", "A=2"] },
      workspace: { requireEncrypted: true, create: "blank", sizeGiB: 5 },
    }).problems,
    [
      "volumes.kmsKeyId: set, but volumes.encrypted is false, and EC2 takes a KmsKeyId only with Encrypted=true; " +
        "set volumes.encrypted to true or remove the key",
      "workspace.requireEncrypted: true, but volumes.encrypted is false, so a workspace volume the agent creates " +
        "could be refused at the next boot; set volumes.encrypted to true",
      'volumes.iops: set, but volumeType is "gp2"; the agent provisions IOPS and throughput on gp3 only',
      'volumes.throughputMiBps: set, but volumeType is "gp2"; the agent provisions IOPS and throughput on gp3 only',
      "volumes.throughputMiBps: 1001 MiB/s is more than 0.25 MiB/s per IOPS of 4000 IOPS (1000), which EC2 " +
        "refuses; raise volumes.iops or lower the throughput",
      "volumes.iops: 4000 is more than 500 per GiB of a blank workspace volume of workspace.sizeGiB 5 (2500), " +
        "which EC2 refuses; lower it or raise workspace.sizeGiB",
      'volumes.tags: "A" given more than once; a tag has one value',
    ],
    "the checks across keys",
  );
  t.same(
    validateConfig({ volumes: { throughputMiBps: 750 } }).problems,
    [],
    "750 MiB/s on the 3000 IOPS baseline is the most",
  );
  t.match(
    validateConfig({ volumes: { throughputMiBps: 751 } }).problems,
    [/of 3000 IOPS \(750\)/],
    "751 is one too many",
  );
  const many = Array.from({ length: MAX_OPERATOR_TAGS + 1 }, (_, i) => `k${i}=v`);
  t.same(
    validateConfig({ volumes: { tags: many.slice(0, MAX_OPERATOR_TAGS) } }).problems,
    [],
    `${MAX_OPERATOR_TAGS} operator tags fit`,
  );
  t.same(validateConfig({ volumes: { tags: many } }).problems, [
    `volumes.tags: ${MAX_OPERATOR_TAGS + 1} tags, more than the ${MAX_OPERATOR_TAGS} a volume can take beside ` +
      `the agent's own (EC2 allows 50 tags on a resource)`,
  ]);
  t.equal(
    MAX_OPERATOR_TAGS + Object.keys(VolumeTag).length,
    50,
    "operator tags and every agent tag together are EC2's 50",
  );
});

t.test("prune: the target must be below the threshold", async (t) => {
  t.same(validateConfig({ prune: { thresholdPercent: 80, targetPercent: 80 } }).problems, [
    "prune.targetPercent: 80 is not below prune.thresholdPercent (80), so a prune could never reach its target; " +
      "lower it",
  ]);
  t.same(validateConfig({ prune: { thresholdPercent: 101 } }).problems.length, 1, "a percent above 100 is refused");
  t.same(validateConfig({ prune: { thresholdPercent: 90, targetPercent: 50 } }).problems, []);
});

t.test("timeouts: the join margin must leave the start limit some time", async (t) => {
  t.same(validateConfig({ timeouts: { startLimitSeconds: 60, joinMarginSeconds: 60 } }).problems, [
    "timeouts.joinMarginSeconds: 60 is not below timeouts.startLimitSeconds (60), so the first phase would have " +
      "no time at all; lower it, or set startLimitSeconds to the autoscaler's limit (0: not counted)",
  ]);
  t.same(
    validateConfig({ timeouts: { startLimitSeconds: 0, joinMarginSeconds: 60 } }).problems,
    [],
    "no limit counted from LaunchTime: the margin is not used",
  );
  t.same(validateConfig({ timeouts: { startLimitSeconds: 120, joinMarginSeconds: 30 } }).problems, []);
  t.equal(validateConfig({ timeouts: { startLimitSeconds: -1 } }).problems.length, 1, "a negative limit is refused");
});

t.test("values must also make sense together (warnings)", async (t) => {
  const { problems, warnings } = validateConfig({
    initializationRateMiBps: 200,
    createFromSnapshot: false,
    workspace: { create: "blank" },
  });
  t.same(problems, []);
  t.match(warnings, [/initializationRateMiBps is set but no volume is ever created from a snapshot/]);
});

t.test("parseConfigText: not JSON is one problem with its position", async (t) => {
  const cases: [string, string][] = [
    ['{\n  "pool": "a",\n  x: 1\n}', 'line 3, column 3: expected a double-quoted property name, found "x"'],
    ['{"pool": "a"', 'line 1, column 13: expected "," or "}", found the end of the file'],
    [
      '{"enabled": yes}',
      'line 1, column 13: unexpected word "yes" (strings need double quotes; the literals are true, false and null)',
    ],
    ['{"a": [1, 2,]}', 'line 1, column 13: trailing comma before "]"'],
    ['{"a": 1,}', 'line 1, column 9: trailing comma before "}"'],
    ['{"a": "x\ny"}', "line 1, column 9: control character (such as a newline) inside a string"],
    ['{"a": 1} {"b": 2}', 'line 1, column 10: unexpected "{" after the end of the JSON value'],
    ['{"a": 01}', 'line 1, column 8: expected "," or "}", found "1"'],
    ["// comment\n{}", 'line 1, column 1: expected a value, found "/"'],
  ];
  for (const [text, where] of cases) {
    t.same(
      parseConfigText(text, "/etc/c.json"),
      { ok: false, problem: `/etc/c.json is not valid JSON: ${where}` },
      JSON.stringify(text),
    );
  }
  t.same(parseConfigText('\uFEFF{"pool": "x"}', "/c"), { ok: true, raw: { pool: "x" }, warnings: [] }, "a BOM is fine");
  const empty = parseConfigText(" \n", "/c");
  t.ok(
    empty.ok && empty.raw === undefined && empty.warnings.length === 1,
    "an empty file means defaults, with a warning",
  );
});

t.test("loadConfig and readConfigFile", async (t) => {
  const dir = t.testdir({
    "good.json": JSON.stringify({ pool: "gpu", timeouts: { deviceSeconds: 10 } }),
    "bad.json": JSON.stringify({ pool: "a;b", timeouts: { deviceSeconds: "x" }, poool: 1 }),
    "broken.json": '{\n  "pool": "gpu",\n}\n',
    "empty.json": "",
    folder: {},
  });
  const at = (name: string) => join(dir, name);

  t.equal(await readConfigFile(at("missing.json")), undefined, "missing: undefined");
  t.equal(await readConfigFile(at("good.json")), JSON.stringify({ pool: "gpu", timeouts: { deviceSeconds: 10 } }));
  await t.rejects(readConfigFile(at("folder")), ConfigError, "unreadable: ConfigError");

  const named = await loadConfig({ path: at("missing.json"), env: {} }).catch((e: unknown) => e);
  t.type(named, ConfigError, "a named file that is missing is an error (exit 3), never the defaults");
  t.same((named as ConfigError).problems, [`${at("missing.json")}: no such file (named by --config)`]);
  t.match((named as ConfigError).remediation, /only the default \/etc\/ebs-cache-agent\/config\.json may be absent/);
  const namedByEnv = await loadConfig({ env: { EBS_CACHE_AGENT_CONFIG: at("missing.json") } }).catch((e: unknown) => e);
  t.same(
    (namedByEnv as ConfigError).problems,
    [`${at("missing.json")}: no such file (named by EBS_CACHE_AGENT_CONFIG)`],
    "so is one the variable names",
  );

  const good = await loadConfig({ path: at("good.json"), env: {} });
  t.equal(good.config.pool, "gpu");
  t.equal(good.config.timeouts.deviceSeconds, 10);
  t.equal(good.fileFound, true);

  const viaEnv = await loadConfig({ env: { EBS_CACHE_AGENT_CONFIG: at("good.json") } });
  t.equal(viaEnv.path, at("good.json"), "the path may come from EBS_CACHE_AGENT_CONFIG");
  t.equal(viaEnv.config.pool, "gpu");

  const empty = await loadConfig({ path: at("empty.json"), env: {} });
  t.same(empty.config, DEFAULTS);
  t.match(empty.warnings, [/is empty; using the defaults/]);

  const bad = await loadConfig({ path: at("bad.json"), env: { EBS_CACHE_AGENT_TTL_HOURS: "forever" } }).catch(
    (e: unknown) => e,
  );
  t.type(bad, ConfigError);
  const problems = (bad as ConfigError).problems;
  t.same(
    problems,
    [
      'poool: unknown key (did you mean "pool"?)',
      'pool: pool name "a;b" contains the shell metacharacter ";"',
      'timeouts.deviceSeconds: must be a number between 1 and 3600, got "x"',
      'EBS_CACHE_AGENT_TTL_HOURS (ttlHours): must be a number between 1 and 8760, got "forever"',
    ],
    "file and environment problems come together",
  );
  t.match((bad as ConfigError).remediation, at("bad.json"), "the remediation names the file");
  t.equal((bad as ConfigError).exitCode, 3);

  const broken = await loadConfig({ path: at("broken.json"), env: {} }).catch((e: unknown) => e);
  t.same((broken as ConfigError).problems, [
    `${at("broken.json")} is not valid JSON: line 3, column 1: trailing comma before "}"`,
  ]);
});

t.test("environment overrides", async (t) => {
  const base = defaultConfig();
  const { config, problems, warnings } = applyEnvOverrides(base, {
    EBS_CACHE_AGENT_ENABLED: "false",
    EBS_CACHE_AGENT_POOL: " gpu ",
    EBS_CACHE_AGENT_REGION: "us-west-2",
    EBS_CACHE_AGENT_EC2_ENDPOINT: "http://127.0.0.1:4566",
    EBS_CACHE_AGENT_INITIALIZATION_RATE_MIBPS: "150",
    EBS_CACHE_AGENT_TIMEOUTS__DEVICE_SECONDS: "5",
    EBS_CACHE_AGENT_PATHS__BY_ID_DIR: "/lab/by-id",
    EBS_CACHE_AGENT_DOCKER__CONTROL: "none",
    EBS_CACHE_AGENT_DOCKER__EXPECTED_IMAGES: "nginx:1, redis ,,",
    EBS_CACHE_AGENT_WORKSPACE__SIZE_GIB: "50",
    EBS_CACHE_AGENT_LOG_LEVEL: "debug",
    EBS_CACHE_AGENT_CONFIG: "/somewhere.json",
    PATH: "/usr/bin",
  });
  t.same(problems, []);
  t.same(warnings, []);
  t.same(config, {
    ...DEFAULTS,
    enabled: false,
    pool: "gpu",
    region: "us-west-2",
    ec2Endpoint: "http://127.0.0.1:4566",
    initializationRateMiBps: 150,
    timeouts: { ...DEFAULTS.timeouts, deviceSeconds: 5 },
    paths: { ...DEFAULTS.paths, byIdDir: "/lab/by-id" },
    docker: { ...DEFAULTS.docker, control: "none", expectedImages: ["nginx:1", "redis"] },
    workspace: { ...DEFAULTS.workspace, sizeGiB: 50 },
    logLevel: "debug",
  });
  t.same(base, DEFAULTS, "the input config is not changed");

  const nulls = applyEnvOverrides(
    { ...base, region: "eu-west-1", imageSet: "x" },
    { EBS_CACHE_AGENT_REGION: "", EBS_CACHE_AGENT_IMAGE_SET: "null" },
  );
  t.same([nulls.config.region, nulls.config.imageSet], [null, null], "empty or null clears a nullable key");
  t.same(applyEnvOverrides(base, { EBS_CACHE_AGENT_DOCKER__EXPECTED_IMAGES: "" }).config.docker.expectedImages, []);
  t.equal(applyEnvOverrides(base, { EBS_CACHE_AGENT_ENABLED: "0" }).config.enabled, false);

  const bad = applyEnvOverrides(base, {
    EBS_CACHE_AGENT_TIMEOUTS__DEVICE_SECONDS: "x",
    EBS_CACHE_AGENT_ENABLED: "maybe",
    EBS_CACHE_AGENT_POOL: "",
    EBS_CACHE_AGENT_VOLUME_TYPE: "gp9",
    EBS_CACHE_AGENT_DOCKER__EXPECTED_IMAGES: "nginx,$(reboot)",
    EBS_CACHE_AGENT_TIMEOUT__DEVICE_SECONDS: "5",
    EBS_CACHE_AGENT_ZZZ: "1",
  });
  t.same(bad.problems, [
    'EBS_CACHE_AGENT_ENABLED (enabled): must be a boolean (true or false), got "maybe"',
    "EBS_CACHE_AGENT_POOL (pool): pool name is empty",
    'EBS_CACHE_AGENT_VOLUME_TYPE (volumeType): must be one of "gp2", "gp3", "io1", "io2", "st1", "sc1", ' +
      '"standard", got "gp9"',
    'EBS_CACHE_AGENT_TIMEOUTS__DEVICE_SECONDS (timeouts.deviceSeconds): must be a number between 1 and 3600, got "x"',
    'EBS_CACHE_AGENT_DOCKER__EXPECTED_IMAGES (docker.expectedImages) item 2: image reference "$(reboot)" ' +
      'contains the shell metacharacter "$"',
  ]);
  t.same(bad.warnings, [
    "environment variable EBS_CACHE_AGENT_TIMEOUT__DEVICE_SECONDS matches no setting and is ignored (did you " +
      "mean EBS_CACHE_AGENT_TIMEOUTS__DEVICE_SECONDS?)",
    "environment variable EBS_CACHE_AGENT_ZZZ matches no setting and is ignored",
  ]);
  t.same(bad.config, DEFAULTS, "bad values change nothing");
});

t.test("precedence: defaults < file < environment < instance tags", async (t) => {
  const dir = t.testdir({ "c.json": JSON.stringify({ pool: "file", ttlHours: 2, logLevel: "debug" }) });
  const { config } = await loadConfig({
    path: join(dir, "c.json"),
    env: { EBS_CACHE_AGENT_POOL: "env", EBS_CACHE_AGENT_TTL_HOURS: "3" },
  });
  t.same([config.pool, config.ttlHours, config.logLevel, config.device], ["env", 3, "debug", "/dev/sdf"]);
  const tagged = applyInstanceTags(config, { "ebs-cache:pool": "tag" });
  t.same([tagged.config.pool, tagged.config.ttlHours], ["tag", 3]);
});

t.test("instance-tag overrides", async (t) => {
  const base: AgentConfig = defaultConfig();
  const none = applyInstanceTags(base, { Name: "worker-1", "aws:autoscaling:groupName": "g" });
  t.same(
    none,
    { config: { ...DEFAULTS, keep: false }, problems: [], warnings: [], applied: [] },
    "no tags: config unchanged, keep false",
  );

  const all = applyInstanceTags(base, {
    "ebs-cache:enabled": "false",
    "ebs-cache:pool": "gpu",
    "ebs-cache:keep": "TRUE",
    "ebs-cache:ttl-hours": "48",
    "ebs-cache:claimed-by": "i-1",
  });
  t.same(all.problems, []);
  t.same(all.config, { ...DEFAULTS, enabled: false, pool: "gpu", keep: true, ttlHours: 48 });
  t.same(all.applied, [
    "enabled = false (instance tag ebs-cache:enabled)",
    "keep = true (instance tag ebs-cache:keep)",
    'pool = "gpu" (instance tag ebs-cache:pool)',
    "ttlHours = 48 (instance tag ebs-cache:ttl-hours)",
  ]);
  t.same(all.warnings, [
    'instance tag "ebs-cache:claimed-by" is not one of the tags that override settings (ebs-cache:enabled, ' +
      "ebs-cache:pool, ebs-cache:keep, ebs-cache:ttl-hours) and is ignored",
  ]);

  const bad = applyInstanceTags(base, {
    "ebs-cache:enabled": "yes",
    "ebs-cache:keep": "",
    "ebs-cache:pool": "$(reboot)",
    "ebs-cache:ttl-hours": "0",
  });
  t.same(bad.problems, [
    'instance tag ebs-cache:enabled: must be true or false, got "yes"',
    'instance tag ebs-cache:keep: must be true or false, got ""',
    'instance tag ebs-cache:pool: pool name "$(reboot)" contains the shell metacharacter "$"',
    "instance tag ebs-cache:ttl-hours: must be a number between 1 and 8760, got 0",
  ]);
  t.same(bad.config, { ...DEFAULTS, keep: false }, "malformed tags are not applied");
  t.same(bad.applied, []);

  const more = (tags: Record<string, string>) => applyInstanceTags(base, tags).problems;
  t.match(more({ "ebs-cache:pool": "../etc" }), [/"\.\."/]);
  t.match(more({ "ebs-cache:pool": "-rf" }), [/starts with "-"/]);
  t.match(more({ "ebs-cache:pool": "a".repeat(300) }), [/300 characters long/]);
  t.match(more({ "ebs-cache:pool": "gpu\n" }), [/whitespace \(U\+000A\)/]);
  t.match(more({ "ebs-cache:ttl-hours": "1d" }), [/got "1d"/]);
  t.match(more({ "ebs-cache:ttl-hours": "NaN" }), [/got "NaN"/]);
  t.match(more({ "ebs-cache:ttl-hours": "9000" }), [/got 9000/]);
  const odd = applyInstanceTags(base, { "ebs-cache:\u202eevil": "1" });
  t.notMatch(odd.warnings[0] ?? "", /\u202e/, "tag keys are escaped in warnings");
});

t.test("schema: every key has a unique env var, a description, and valid defaults", async (t) => {
  const names = CONFIG_KEYS.map((key) => key.envVar);
  t.equal(new Set(names).size, names.length, "unique");
  t.notOk(names.includes("EBS_CACHE_AGENT_CONFIG"), "no clash with the config-path variable");
  for (const key of CONFIG_KEYS) t.ok(key.field.description.length > 10, `${key.path} is described`);
  t.same(validateConfig(defaultConfig()).problems, [], "the defaults validate");
  t.same(names, [
    "EBS_CACHE_AGENT_ENABLED",
    "EBS_CACHE_AGENT_POOL",
    "EBS_CACHE_AGENT_IMAGE_SET",
    "EBS_CACHE_AGENT_INSTANCE_TYPE_POOLS",
    "EBS_CACHE_AGENT_REGION",
    "EBS_CACHE_AGENT_EC2_ENDPOINT",
    "EBS_CACHE_AGENT_IMDS_ENDPOINT",
    "EBS_CACHE_AGENT_DEVICE",
    "EBS_CACHE_AGENT_VOLUME_TYPE",
    "EBS_CACHE_AGENT_CREATE_FROM_SNAPSHOT",
    "EBS_CACHE_AGENT_INITIALIZATION_RATE_MIBPS",
    "EBS_CACHE_AGENT_VOLUMES__ENCRYPTED",
    "EBS_CACHE_AGENT_VOLUMES__KMS_KEY_ID",
    "EBS_CACHE_AGENT_VOLUMES__IOPS",
    "EBS_CACHE_AGENT_VOLUMES__THROUGHPUT_MIBPS",
    "EBS_CACHE_AGENT_VOLUMES__TAGS",
    "EBS_CACHE_AGENT_CLAIM__CANDIDATES_PER_LISTING",
    "EBS_CACHE_AGENT_CLAIM__MAX_VOLUMES",
    "EBS_CACHE_AGENT_CLAIM__MAX_LOSSES",
    "EBS_CACHE_AGENT_CLAIM__QUARANTINE_HOURS",
    "EBS_CACHE_AGENT_TIMEOUTS__IMDS_SECONDS",
    "EBS_CACHE_AGENT_TIMEOUTS__IMDS_REQUEST_SECONDS",
    "EBS_CACHE_AGENT_TIMEOUTS__ATTACH_SECONDS",
    "EBS_CACHE_AGENT_TIMEOUTS__DEVICE_SECONDS",
    "EBS_CACHE_AGENT_TIMEOUTS__MOUNT_HOLDER_SECONDS",
    "EBS_CACHE_AGENT_TIMEOUTS__DOCKER_SECONDS",
    "EBS_CACHE_AGENT_TIMEOUTS__BOOT_SECONDS",
    "EBS_CACHE_AGENT_TIMEOUTS__START_LIMIT_SECONDS",
    "EBS_CACHE_AGENT_TIMEOUTS__JOIN_MARGIN_SECONDS",
    "EBS_CACHE_AGENT_TIMEOUTS__CREATE_SECONDS",
    "EBS_CACHE_AGENT_PATHS__BY_ID_DIR",
    "EBS_CACHE_AGENT_PATHS__SYSFS_ROOT",
    "EBS_CACHE_AGENT_PATHS__MOUNT_ROOT",
    "EBS_CACHE_AGENT_PATHS__DAEMON_JSON",
    "EBS_CACHE_AGENT_PATHS__CONTAINERD_CONFIG",
    "EBS_CACHE_AGENT_PATHS__DOCKER_HOST",
    "EBS_CACHE_AGENT_PATHS__STATE_DIR",
    "EBS_CACHE_AGENT_PATHS__UNITS_DIR",
    "EBS_CACHE_AGENT_PATHS__SYSTEMD_RUN_DIR",
    "EBS_CACHE_AGENT_DOCKER__CONTROL",
    "EBS_CACHE_AGENT_DOCKER__UNIT",
    "EBS_CACHE_AGENT_DOCKER__EXPECTED_IMAGES",
    "EBS_CACHE_AGENT_LABELS__PREFIX",
    "EBS_CACHE_AGENT_LABELS__MODE",
    "EBS_CACHE_AGENT_LABELS__PROTECTED_KEYS",
    "EBS_CACHE_AGENT_RELEASE__STOP_DOCKER",
    "EBS_CACHE_AGENT_TTL_HOURS",
    "EBS_CACHE_AGENT_WORKSPACE__LABELS_TAG",
    "EBS_CACHE_AGENT_WORKSPACE__ID_KEYS",
    "EBS_CACHE_AGENT_WORKSPACE__MINIMUM_KEYS",
    "EBS_CACHE_AGENT_WORKSPACE__CREATE",
    "EBS_CACHE_AGENT_WORKSPACE__SIZE_GIB",
    "EBS_CACHE_AGENT_WORKSPACE__REQUIRE_ENCRYPTED",
    "EBS_CACHE_AGENT_WORKSPACE__WAIT_FOR_LABELS_TAG",
    "EBS_CACHE_AGENT_WORKSPACE__WAIT_FOR_LABELS_TAG_SECONDS",
    "EBS_CACHE_AGENT_PREWARM__STRATEGY",
    "EBS_CACHE_AGENT_PREWARM__BACKGROUND",
    "EBS_CACHE_AGENT_PREWARM__CHECK__SECONDS",
    "EBS_CACHE_AGENT_PREWARM__CHECK__READS",
    "EBS_CACHE_AGENT_PREWARM__CHECK__IO_DEPTH",
    "EBS_CACHE_AGENT_PREWARM__THRESHOLDS__MIN_IOPS",
    "EBS_CACHE_AGENT_PREWARM__THRESHOLDS__MAX_MEDIAN_LATENCY_MS",
    "EBS_CACHE_AGENT_PREWARM__INITIALIZE__IO_DEPTH",
    "EBS_CACHE_AGENT_PREWARM__INITIALIZE__MAX_IO_KIB",
    "EBS_CACHE_AGENT_PREWARM__INITIALIZE__TIMEOUT_MINUTES",
    "EBS_CACHE_AGENT_PREWARM__INITIALIZE__PROGRESS_SECONDS",
    "EBS_CACHE_AGENT_PREWARM__GIVE_WAY__ENABLED",
    "EBS_CACHE_AGENT_PREWARM__GIVE_WAY__RUN_MS",
    "EBS_CACHE_AGENT_PREWARM__GIVE_WAY__PAUSE_MS",
    "EBS_CACHE_AGENT_PREWARM__GIVE_WAY__MAX_PAUSED_MS",
    "EBS_CACHE_AGENT_PREWARM__GIVE_WAY__SETTLE_MS",
    "EBS_CACHE_AGENT_PREWARM__GIVE_WAY__OTHERS_IOPS",
    "EBS_CACHE_AGENT_KEEPER__ZONES",
    "EBS_CACHE_AGENT_KEEPER__MIN_AVAILABLE",
    "EBS_CACHE_AGENT_KEEPER__MAX_AVAILABLE",
    "EBS_CACHE_AGENT_KEEPER__MAX_VOLUMES",
    "EBS_CACHE_AGENT_KEEPER__MAX_GIB",
    "EBS_CACHE_AGENT_KEEPER__INITIALIZATION_RATE_MIBPS",
    "EBS_CACHE_AGENT_KEEPER__RECLAIM_STOPPED_AFTER_DAYS",
    "EBS_CACHE_AGENT_COST__GIB_MONTH_USD",
    "EBS_CACHE_AGENT_COST__IOPS_MONTH_USD",
    "EBS_CACHE_AGENT_COST__THROUGHPUT_MONTH_USD",
    "EBS_CACHE_AGENT_COST__SNAPSHOT_GIB_MONTH_USD",
    "EBS_CACHE_AGENT_REFRESH__ENABLED",
    "EBS_CACHE_AGENT_REFRESH__CONCURRENCY",
    "EBS_CACHE_AGENT_REFRESH__PULL_SECONDS",
    "EBS_CACHE_AGENT_REFRESH__PRE_PULLED_IMAGES_TAG",
    "EBS_CACHE_AGENT_GC__SUPERSEDED_GRACE_HOURS",
    "EBS_CACHE_AGENT_PRUNE__AFTER_BOOT",
    "EBS_CACHE_AGENT_PRUNE__PERIODIC",
    "EBS_CACHE_AGENT_PRUNE__THRESHOLD_PERCENT",
    "EBS_CACHE_AGENT_PRUNE__TARGET_PERCENT",
    "EBS_CACHE_AGENT_METRICS__TEXTFILE_DIR",
    "EBS_CACHE_AGENT_LOG_LEVEL",
  ]);
});

t.test(
  "the generated files (shipped schema, standalone validator) are what scripts/config-schema.ts writes",
  async (t) => {
    for (const [path, text] of Object.entries(generate())) {
      t.equal(
        await readFile(path, "utf8"),
        text,
        `${path} is current (regenerate with: npx tsx scripts/config-schema.ts)`,
      );
    }
  },
);

t.test("the shipped schema accepts the example configs and flags what an editor should", async (t) => {
  const validate = await shippedConfigValidator();
  const example: unknown = JSON.parse(await readFile("config/config.json", "utf8"));
  t.ok(validate(example), `config/config.json is valid: ${JSON.stringify(validate.errors)}`);
  t.match(example, { $schema: "./config.schema.json" }, "the example names its schema for editors");
  t.ok(validate(FULL), `every key set: ${JSON.stringify(validate.errors)}`);
  t.ok(validate(DEFAULTS), `the defaults: ${JSON.stringify(validate.errors)}`);

  const flagged = (config: unknown) =>
    validate(config) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.keyword}`);
  t.same(flagged({ pools: "x" }), [" additionalProperties"], "a misspelt key");
  t.same(flagged({ timeouts: { deviceSecond: 5 } }), ["/timeouts additionalProperties"], "a misspelt nested key");
  t.same(flagged({ volumeType: "gp4" }), ["/volumeType enum"]);
  t.same(flagged({ ttlHours: 0 }), ["/ttlHours minimum"]);
  t.same(
    flagged({ device: "/dev/sda", labels: { prefix: "Bad_Prefix" } }),
    ["/device pattern", "/labels/prefix pattern"],
    "formats have patterns",
  );
  t.same(flagged({ workspace: { idKeys: ["userid"] } }), ["/workspace/idKeys/0 enum"]);
});

t.test("a top-level $schema key is accepted and ignored", async (t) => {
  t.same(validateConfig({ $schema: "./config.schema.json", pool: "gpu" }), {
    config: { ...DEFAULTS, pool: "gpu" },
    problems: [],
    warnings: [],
  });
  t.same(validateConfig({ $schema: 5 }).problems, [
    "$schema: must be a string (the path or URL of the config's JSON Schema, for editors), got 5",
  ]);
  t.same(
    validateConfig({ timeouts: { $schema: "x" } }).problems,
    [
      "timeouts.$schema: unknown key (keys of timeouts: imdsSeconds, imdsRequestSeconds, attachSeconds, " +
        "deviceSeconds, mountHolderSeconds, dockerSeconds, bootSeconds, startLimitSeconds, joinMarginSeconds, " +
        "createSeconds)",
    ],
    "only at the top",
  );
});

t.test("lists the schema holds agree with the code that uses them", async (t) => {
  t.same(CONFIG_SCHEMA.properties.workspace.properties.idKeys.items.enum, WORKSPACE_KEYS, "workspace keys");
  // AgentConfig is derived from the schema: a value outside an enum does not type-check.
  const strategy: AgentConfig["prewarm"]["strategy"] = "files";
  // @ts-expect-error -- not one of the schema's strategies
  const wrong: AgentConfig["prewarm"]["strategy"] = "fast";
  // @ts-expect-error -- a nullable key is `number | null`, never a string
  const text: AgentConfig["initializationRateMiBps"] = "100";
  t.same([strategy, wrong, text], ["files", "fast", "100"]);
});
