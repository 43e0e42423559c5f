/**
 * The configuration schema, as data: every key with its type, default, allowed values, meaning
 * and environment variable. `AgentConfig` is derived from it, the defaults are read from it,
 * validation walks it and the Markdown reference (scripts/config-reference.ts) prints it, so a
 * key added here is typed, defaulted, validated, overridable from the environment and documented.
 */

/** Named checks for string values; validate.ts holds the code, this file only the names. */
export type StringFormat =
  | "poolName"
  | "imageSet"
  | "region"
  | "url"
  | "device"
  | "absolutePath"
  | "dockerHost"
  | "systemdUnit"
  | "imageRef"
  | "labelPrefix"
  | "labelKey"
  | "tagKey"
  | "workspaceKey";

/** What each format accepts, in the words used by error messages and the reference. */
export const FORMAT_DESCRIPTIONS: Record<StringFormat, string> = {
  poolName: "a pool name (letters, digits, '.', '_', '-', starting with a letter or digit, at most 63 characters)",
  imageSet: "an image-set name (printable ASCII without shell metacharacters, at most 255 characters)",
  region: "an AWS region name such as us-east-1",
  url: "an http:// or https:// URL",
  device: "a device name matching ^/dev/(sd[f-p]|xvd[f-p])$",
  absolutePath: "an absolute path without '..' segments",
  dockerHost: "unix:// followed by an absolute socket path",
  systemdUnit: "a systemd service name such as docker.service",
  imageRef: "a Docker image reference (registry[:port]/path:tag or @sha256:…)",
  labelPrefix: "a label prefix matching ^[a-z0-9]+([.-][a-z0-9]+)*$",
  labelKey: "a docker label key (lower-case letters, digits, '.', '_', '-', at most 256 characters)",
  tagKey: "an EC2 tag key (1 to 128 printable characters, not starting with aws:)",
  workspaceKey: "one of osparc's placement label keys: product-name, wallet-id, user-id, project-id, node-id",
};

interface FieldBase {
  readonly description: string;
}

export interface BooleanField extends FieldBase {
  readonly kind: "boolean";
  readonly default: boolean;
}

export interface StringField extends FieldBase {
  readonly kind: "string";
  readonly default: string | null;
  /** null is allowed (and means "not set"; the description says what happens then). */
  readonly nullable?: boolean;
  readonly format?: StringFormat;
}

export interface NumberField extends FieldBase {
  readonly kind: "number";
  readonly default: number | null;
  readonly nullable?: boolean;
  readonly min: number;
  readonly max: number;
  readonly integer?: boolean;
}

export interface EnumField extends FieldBase {
  readonly kind: "enum";
  readonly values: readonly string[];
  readonly default: string;
}

/** A list of strings; from the environment, a comma-separated list. */
export interface StringListField extends FieldBase {
  readonly kind: "stringList";
  readonly default: readonly string[];
  readonly itemFormat?: StringFormat;
}

export type Field = BooleanField | StringField | NumberField | EnumField | StringListField;

/** A nested object of keys (`timeouts`, `paths`, …). */
export interface Group {
  readonly kind: "group";
  readonly description: string;
  readonly fields: { readonly [key: string]: Field | Group };
}

const seconds = (what: string, default_: number) =>
  ({ kind: "number", default: default_, min: 1, max: 3600, description: `Seconds to wait for ${what}.` }) as const;

const absolutePath = (default_: string, description: string) =>
  ({ kind: "string", default: default_, format: "absolutePath", description }) as const;

export const CONFIG_SCHEMA = {
  kind: "group",
  description: "ebs-cache-agent configuration",
  fields: {
    enabled: {
      kind: "boolean",
      default: true,
      description: "Run at all. false: boot reports `disabled` and exits 0 (docker keeps its own data-root).",
    },
    pool: {
      kind: "string",
      default: "default",
      format: "poolName",
      description: "The pool whose volumes and snapshots this host uses (volume tag `ebs-cache:pool`).",
    },
    imageSet: {
      kind: "string",
      default: null,
      nullable: true,
      format: "imageSet",
      description:
        "When set, pool volumes and snapshots must carry tag `ebs-cache:image-set` with this value; null accepts any image set.",
    },
    region: {
      kind: "string",
      default: null,
      nullable: true,
      format: "region",
      description: "AWS region; null takes it from the instance metadata (IMDS).",
    },
    ec2Endpoint: {
      kind: "string",
      default: null,
      nullable: true,
      format: "url",
      description: "EC2 API endpoint (a VPC endpoint, or the lab's emulator); null uses the SDK's default for the region.",
    },
    imdsEndpoint: {
      kind: "string",
      default: null,
      nullable: true,
      format: "url",
      description: "Instance metadata endpoint (the lab's emulator); null uses the SDK's default.",
    },
    device: {
      kind: "string",
      default: "/dev/sdf",
      format: "device",
      description: "Device name passed to AttachVolume (on Nitro the real device is found by the volume's NVMe serial).",
    },
    volumeType: {
      kind: "enum",
      values: ["gp2", "gp3", "io1", "io2", "st1", "sc1", "standard"],
      default: "gp3",
      description: "EBS volume type of volumes the agent creates.",
    },
    createFromSnapshot: {
      kind: "boolean",
      default: true,
      description: "Create a volume from the pool's newest snapshot when no pool volume is available.",
    },
    initializationRateMiBps: {
      kind: "number",
      default: null,
      nullable: true,
      min: 100,
      max: 300,
      integer: true,
      description:
        "Volume initialization rate (MiB/s) requested for volumes created from a snapshot; null leaves blocks to load lazily.",
    },
    claim: {
      kind: "group",
      description: "How a boot picks and claims a volume when many machines boot at once.",
      fields: {
        candidatesPerListing: {
          kind: "number",
          default: 50,
          min: 5,
          max: 500,
          integer: true,
          description:
            "Available volumes asked of EC2 in one DescribeVolumes (one page): a boot's EC2 calls do not grow with the pool. After losing a volume to another machine, the boot asks again for a fresh page.",
        },
        maxVolumes: {
          kind: "number",
          default: 3,
          min: 1,
          max: 10,
          integer: true,
          description:
            "Volumes one boot may take in turn when a claimed volume turns out unusable (foreign filesystem, no device): each is handed back, tagged `ebs-cache:last-error`, and the next candidate tried.",
        },
        maxLosses: {
          kind: "number",
          default: 5,
          min: 1,
          max: 50,
          integer: true,
          description: "Claims one boot may lose to other machines (VolumeInUse) before it falls back to the snapshot or degrades.",
        },
        quarantineHours: {
          kind: "number",
          default: 6,
          min: 0,
          max: 720,
          description:
            "A volume tagged `ebs-cache:last-error` less than this long ago (tag `ebs-cache:last-error-at`) is not a candidate; 0 turns quarantine off. `ebs-cache-agent pool` shows quarantined volumes.",
        },
      },
    },
    timeouts: {
      kind: "group",
      description: "How long each wait may last before the agent gives up on it.",
      fields: {
        imdsSeconds: {
          ...seconds("the instance metadata service", 60),
          description:
            "Seconds to wait for the instance metadata service: the identity, and the instance profile's credentials for EC2 (each, retries included). A node that gets no credentials in that time comes up degraded.",
        },
        imdsRequestSeconds: {
          ...seconds("one answer of the instance metadata service", 5),
          description:
            "Seconds to wait for one answer of the instance metadata service (a token, a path, the credentials) before asking again, within `timeouts.imdsSeconds`.",
        },
        attachSeconds: seconds("a volume to reach `attached` (or `available` when detaching)", 120),
        deviceSeconds: seconds("the attached volume's block device to appear", 60),
        dockerSeconds: seconds("docker to start and answer on the new data-root", 120),
        bootSeconds: {
          kind: "number",
          default: 40,
          min: 5,
          max: 3600,
          description:
            "The first boot phase's budget (`boot --no-docker`, before docker.service), identification included: whatever is not done by then is undone and the node degrades, so it still joins the swarm within the autoscaler's start-time limit (osparc's EC2_INSTANCES_MAX_START_TIME, 1 minute by default).",
        },
        createSeconds: {
          kind: "number",
          default: 20,
          min: 0,
          max: 3600,
          description:
            "How long creating a volume from the snapshot and attaching it takes: with less of the boot budget left, no volume is created (the node degrades instead of being undone at the deadline).",
        },
      },
    },
    paths: {
      kind: "group",
      description: "Where the agent finds and puts things on the host (the lab points these into its sandbox).",
      fields: {
        byIdDir: absolutePath("/dev/disk/by-id", "udev's by-id links, watched for the attached volume's device."),
        sysfsRoot: absolutePath("/sys", "sysfs, read to confirm a device's NVMe serial."),
        mountRoot: absolutePath("/var/lib/ebs-cache", "Where cache volumes are mounted."),
        daemonJson: absolutePath("/etc/docker/daemon.json", "dockerd's configuration file, where `data-root` and engine labels are set."),
        dockerHost: {
          kind: "string",
          default: "unix:///var/run/docker.sock",
          format: "dockerHost",
          description: "The docker API socket.",
        },
        stateDir: absolutePath("/var/lib/ebs-cache-agent", "The agent's own state (what it attached, backups of daemon.json)."),
      },
    },
    docker: {
      kind: "group",
      description: "How the agent drives docker.",
      fields: {
        control: {
          kind: "enum",
          values: ["systemd", "none"],
          default: "systemd",
          description:
            "How docker is (re)started on the new data-root: `systemd` restarts the unit; `none` leaves starting docker to systemd ordering (the agent runs Before=docker.service).",
        },
        unit: {
          kind: "string",
          default: "docker.service",
          format: "systemdUnit",
          description: "The systemd unit of dockerd.",
        },
        expectedImages: {
          kind: "stringList",
          default: [],
          itemFormat: "imageRef",
          description:
            "Images that must be present after boot, in addition to those listed by the volume's `ebs-cache:images` tag.",
        },
      },
    },
    labels: {
      kind: "group",
      description: "The swarm labels that report readiness.",
      fields: {
        prefix: {
          kind: "string",
          default: "io.simcore.ebs-cache",
          format: "labelPrefix",
          description:
            "Prefix of the docker label keys the agent owns; it writes and removes nothing else. Refused when empty, in docker's reserved namespaces (`com.docker.`, `io.docker.`, `org.dockerproject.`) or osparc's (`io.simcore.osparc-`), or when it equals, contains or lies above a label osparc's autoscaler sets (`io.simcore.osparc-services-ready`, `user-id`, `ec2-instance-type`, …; see docs/labels.md) or one of `labels.protectedKeys`.",
        },
        mode: {
          kind: "enum",
          values: ["auto", "node", "engine", "off"],
          default: "auto",
          description:
            "`node`: node labels through a manager's API; `engine`: daemon.json labels (work from a worker); `auto`: node labels when a manager is reachable, engine labels otherwise; `off`: none.",
        },
        protectedKeys: {
          kind: "stringList",
          default: [],
          itemFormat: "labelKey",
          description:
            "More node labels other systems set on these hosts, protected like osparc's own: list here the autoscaler's `NODES_MONITORING_NODE_LABELS`, `NODES_MONITORING_NEW_NODES_LABELS` and instance types' `custom_node_labels`. `labels.prefix` may not equal, contain or lie above any of them.",
        },
      },
    },
    release: {
      kind: "group",
      description: "What `ebs-cache-agent release` (ExecStop of ebs-cache-agent-release.service, at shutdown) may do.",
      fields: {
        stopDocker: {
          kind: "boolean",
          default: true,
          description:
            "Stop docker when it still runs on the cache volume (a release by hand; at shutdown systemd has stopped it already). false: such a release is refused (exit 1) and nothing is changed.",
        },
      },
    },
    ttlHours: {
      kind: "number",
      default: 24,
      min: 1,
      max: 8760,
      description: "Hours a released volume is kept (`ebs-cache:expires-at` = release time + this) before gc may delete it; the `ebs-cache:ttl-hours` instance tag overrides it.",
    },
    workspace: {
      kind: "group",
      description: "Workspace volumes: tied to a user / project / node and kept for a while after release.",
      fields: {
        labelsTag: {
          kind: "string",
          default: "io.simcore.autoscaling.ec2_instance.docker_node_labels",
          format: "tagKey",
          description:
            "The instance tag holding osparc's docker node labels (JSON), whole or in 256-character chunks `<tag>_0`, `<tag>_1`, …: the workspace ids, and `<labels.prefix>.keep` / `.enabled`. A missing chunk, bad JSON or a bad id is a warning and the pool is used.",
        },
        idKeys: {
          kind: "stringList",
          default: ["user-id", "project-id", "node-id"],
          itemFormat: "workspaceKey",
          description:
            "The label keys (also matched as a suffix `.<key>`) that identify a workspace. A volume serves an instance whose ids equal its own for exactly the keys present; `[]` turns workspaces off.",
        },
        minimumKeys: {
          kind: "stringList",
          default: ["user-id"],
          itemFormat: "workspaceKey",
          description: "Keys that must all be among the labels for a workspace; with fewer ids the pool is used. Each must be one of `idKeys`.",
        },
        create: {
          kind: "enum",
          values: ["snapshot", "blank", "never"],
          default: "snapshot",
          description:
            "When no workspace volume exists for the ids: `snapshot` creates one from the pool's newest snapshot, `blank` creates an empty one (formatted by the agent), `never` uses the pool instead.",
        },
        sizeGiB: {
          kind: "number",
          default: 20,
          min: 1,
          max: 16384,
          integer: true,
          description: "Size (GiB) of a blank workspace volume; a volume from a snapshot is at least the snapshot's size.",
        },
        waitForLabelsTag: {
          kind: "enum",
          values: ["warm-buffer", "always", "never"],
          default: "warm-buffer",
          description:
            "When the labels tag is missing at boot, wait for it (`waitForLabelsTagSeconds`) before using the pool: `warm-buffer` only on an instance being activated from a warm buffer (tag `io.simcore.autoscaling.warm_buffer_machine=false`: osparc writes the task's tags after StartInstances), `always`, or `never`.",
        },
        waitForLabelsTagSeconds: {
          kind: "number",
          default: 15,
          min: 0,
          max: 600,
          description: "How long a boot waits for a late labels tag (counted in the first phase's budget, timeouts.bootSeconds).",
        },
      },
    },
    prewarm: {
      kind: "group",
      description: "The pre-warm of volumes restored from a snapshot, whose blocks load lazily from S3 (see docs/prewarm.md).",
      fields: {
        strategy: {
          kind: "enum",
          values: ["off", "check", "files", "device"],
          default: "check",
          description:
            "`check`: a short fio sample of random reads over the allocated data gives a verdict (label `<prefix>.prewarm=warm|cold`); `files`: reads the filesystem's allocated data once (initialization), then tags the volume `ebs-cache:initialized`; `device`: AWS's documented full read of the device; `off`: nothing. Volumes not made from a snapshot, tagged initialized, or initialized by EBS at a provisioned rate are never read.",
        },
        background: {
          kind: "boolean",
          default: true,
          description:
            "`files`/`device`: initialize after docker is up, the node labelled `warming` (usable) until done, then `ready`; false: initialize before the node is reported ready.",
        },
        check: {
          kind: "group",
          description: "The sample that gives the verdict.",
          fields: {
            seconds: { kind: "number", default: 5, min: 1, max: 300, description: "Upper bound of the sample's duration (fio --runtime)." },
            reads: { kind: "number", default: 2000, min: 10, max: 1000000, integer: true, description: "Random 4 KiB reads in the sample (fewer when the time bound comes first)." },
            ioDepth: { kind: "number", default: 16, min: 1, max: 256, integer: true, description: "Reads in flight during the sample." },
          },
        },
        thresholds: {
          kind: "group",
          description: "When the sample says `warm`.",
          fields: {
            minIops: {
              kind: "number",
              default: 1000,
              min: 1,
              max: 10000000,
              description: "Fewer IOPS than this in the sample: `cold` (a warm gp3 volume gives ~3000 at the sample's depth, a cold one a few hundred).",
            },
            maxMedianLatencyMs: {
              kind: "number",
              default: 20,
              nullable: true,
              min: 0.01,
              max: 100000,
              description: "A median completion latency above this (ms): `cold`; null: latency is only reported.",
            },
          },
        },
        initialize: {
          kind: "group",
          description: "The reads of the `files` and `device` strategies.",
          fields: {
            ioDepth: { kind: "number", default: 32, min: 1, max: 256, integer: true, description: "Reads in flight (`files`; `device` always uses AWS's 32)." },
            maxIoKiB: { kind: "number", default: 1024, min: 4, max: 65536, integer: true, description: "Largest single read of the `files` strategy (KiB)." },
            timeoutMinutes: {
              kind: "number",
              default: null,
              nullable: true,
              min: 1,
              max: 10080,
              integer: true,
              description: "Give the initialization up after this long (the volume stays untagged; `ebs-cache-agent prewarm` resumes it); null: no limit.",
            },
            progressSeconds: { kind: "number", default: 10, min: 1, max: 3600, integer: true, description: "Seconds between progress lines in the log and updates of the state file." },
          },
        },
      },
    },
    logLevel: {
      kind: "enum",
      values: ["error", "warning", "notice", "info", "debug"],
      default: "info",
      description: "The most verbose journald priority that is logged.",
    },
  },
} as const satisfies Group;

/** The value type a schema node describes. */
export type ValueOf<F> = F extends { kind: "group"; fields: infer G }
  ? { readonly [K in keyof G]: ValueOf<G[K]> }
  : F extends { kind: "boolean" }
    ? boolean
    : F extends { kind: "enum"; values: readonly (infer V)[] }
      ? V
      : F extends { kind: "stringList" }
        ? readonly string[]
        : F extends { kind: "string"; nullable: true }
          ? string | null
          : F extends { kind: "string" }
            ? string
            : F extends { kind: "number"; nullable: true }
              ? number | null
              : F extends { kind: "number" }
                ? number
                : never;

/** The validated configuration (defaults < file < environment). */
export type AgentConfig = ValueOf<typeof CONFIG_SCHEMA>;

export const DEFAULT_CONFIG_PATH = "/etc/ebs-cache-agent/config.json";
/** Names the config file (when the caller gives no path). Not a config key. */
export const CONFIG_PATH_ENV = "EBS_CACHE_AGENT_CONFIG";
export const ENV_PREFIX = "EBS_CACHE_AGENT_";

/** One leaf key of the schema, with where it sits and the environment variable that overrides it. */
export interface ConfigKey {
  /** Dotted JSON path: `timeouts.deviceSeconds`. */
  readonly path: string;
  readonly segments: readonly string[];
  readonly field: Field;
  readonly envVar: string;
}

/**
 * `EBS_CACHE_AGENT_` + the dotted path in SCREAMING_SNAKE: camelCase boundaries become `_`,
 * nesting becomes `__` (`timeouts.deviceSeconds` → `EBS_CACHE_AGENT_TIMEOUTS__DEVICE_SECONDS`).
 * Binary units count as one word (`sizeGiB` → `SIZE_GIB`, not `SIZE_GI_B`).
 */
export function envVarName(segments: readonly string[]): string {
  const snake = (segment: string) =>
    segment
      .replace(/([KMGT])iB/g, (_, unit: string) => `${unit}ib`)
      .replace(/([a-z0-9])([A-Z])/g, "$1_$2")
      .toUpperCase();
  return ENV_PREFIX + segments.map(snake).join("__");
}

function flatten(group: Group, prefix: readonly string[]): ConfigKey[] {
  return Object.entries(group.fields).flatMap(([name, node]) => {
    const segments = [...prefix, name];
    if (node.kind === "group") return flatten(node, segments);
    return [{ path: segments.join("."), segments, field: node, envVar: envVarName(segments) }];
  });
}

/** Every leaf key, in schema order. */
export const CONFIG_KEYS: readonly ConfigKey[] = flatten(CONFIG_SCHEMA, []);

/** Every group's dotted path (`timeouts`, `paths`, …), for messages about misplaced keys. */
export const CONFIG_GROUPS: readonly string[] = Object.entries(CONFIG_SCHEMA.fields)
  .filter(([, node]) => node.kind === "group")
  .map(([name]) => name);

/** The default of a key or group, as a fresh value (lists and objects are not shared). */
export function defaultOf(node: Field | Group): unknown {
  if (node.kind === "group") return Object.fromEntries(Object.entries(node.fields).map(([name, child]) => [name, defaultOf(child)]));
  return node.kind === "stringList" ? [...node.default] : node.default;
}

/** A fresh copy of the defaults (callers may keep it; nothing shares it). */
export function defaultConfig(): AgentConfig {
  return defaultOf(CONFIG_SCHEMA) as AgentConfig;
}

/** What a field accepts, as the end of "must be …". */
export function expectationOf(field: Field): string {
  const orNull = "nullable" in field && field.nullable ? ", or null" : "";
  switch (field.kind) {
    case "boolean":
      return "a boolean (true or false)";
    case "number":
      return `${field.integer ? "an integer" : "a number"} between ${field.min} and ${field.max}${orNull}`;
    case "enum":
      return `one of ${field.values.map((v) => JSON.stringify(v)).join(", ")}`;
    case "string":
      return `${field.format ? FORMAT_DESCRIPTIONS[field.format] : "a string"}${orNull}`;
    case "stringList":
      return `a list of ${field.itemFormat ? `strings, each ${FORMAT_DESCRIPTIONS[field.itemFormat]}` : "strings"}`;
  }
}
