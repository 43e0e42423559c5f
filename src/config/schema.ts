/**
 * The configuration schema: a JSON Schema (draft 2020-12) written as a TypeScript constant, so
 * that `AgentConfig` is derived from it by the type mapper below. From it come the defaults,
 * the environment variables, the Markdown reference (scripts/config-reference.ts), and, by
 * scripts/config-schema.ts, the schema file shipped beside config.json (config/config.schema.json,
 * what editors check a config against through `$schema`) and the validator generated from it
 * with ajv (schema-validator.generated.ts). A key added here is typed, defaulted, validated,
 * overridable from the environment and documented.
 *
 * `x-format` names a check of validate.ts that JSON Schema cannot express (an image reference's
 * grammar, a label prefix that must not collide with osparc's labels); the shipped file carries
 * the format's pattern too, so that an editor flags most bad values on its own.
 */
import { MAX_OPERATOR_TAGS, MAX_TAG_VALUE, MAX_TAGS_PER_RESOURCE } from "../tags.ts";

/** Named checks for string values. */
export type StringFormat =
  | "poolName"
  | "imageSet"
  | "region"
  | "availabilityZone"
  | "url"
  | "device"
  | "absolutePath"
  | "dockerHost"
  | "systemdUnit"
  | "imageRef"
  | "labelPrefix"
  | "labelKey"
  | "tagKey"
  | "workspaceKey"
  | "kmsKeyId"
  | "operatorTag"
  | "instanceTypePool";

interface FormatSpec {
  /** What the format accepts, in the words used by error messages and the reference. */
  readonly description: string;
  /**
   * A pattern of the shipped schema (for editors and ajv). Where validate.ts has code for the
   * format, that code decides and gives the message; the pattern is then only as strict as it.
   */
  readonly pattern?: string;
}

/**
 * The end of the string in a pattern. The patterns are read by ajv (ECMAScript, `u` flag), by
 * editors, and by validators in other languages (python's jsonschema, with `re`), so they keep
 * to what all of them read alike: explicit ranges instead of `\p{…}`, `\d`, `\s` or `.` (whose
 * sets differ between engines), no lookbehind. `$` alone also matches before a final newline in
 * Python's `re` (and PCRE): the lookahead makes it the end of the string everywhere.
 */
const END = "$(?!\\n)";
/** A KMS key id: a key's UUID, or a multi-Region key's `mrk-` id. */
const KMS_KEY_ID = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|mrk-[0-9a-fA-F]{32}";
const KMS_ALIAS = "alias/[A-Za-z0-9/_-]{1,250}";
/** The start of a KMS ARN, up to the account: what follows is `key/<id>` or an alias. */
const KMS_ARN = "arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}";

/** ECMAScript's `\S` spelled out: anything but its whitespace and line terminators. */
const NOT_SPACE = "[^\\t-\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]";

export const FORMATS: Readonly<Record<StringFormat, FormatSpec>> = {
  poolName: {
    description: "a pool name (letters, digits, '.', '_', '-', starting with a letter or digit, at most 63 characters)",
    pattern: `^[A-Za-z0-9][A-Za-z0-9._-]{0,62}${END}`,
  },
  imageSet: {
    description:
      "an image-set name (printable ASCII without shell metacharacters, at most 256 characters: a tag value)",
    pattern: `^[!-~]{1,256}${END}`,
  },
  region: { description: "an AWS region name such as us-east-1", pattern: `^[a-z]{2,4}(-[a-z]+)+-[0-9]{1,2}${END}` },
  availabilityZone: {
    description: "an availability zone name such as us-east-1a",
    pattern: `^[a-z]{2,4}(-[a-z]+)+-[0-9]{1,2}[a-z]${END}`,
  },
  url: { description: "an http:// or https:// URL", pattern: `^[hH][tT][tT][pP][sS]?://${NOT_SPACE}+${END}` },
  device: {
    description: "a device name matching ^/dev/(sd[f-p]|xvd[f-p])$",
    pattern: `^/dev/(sd[f-p]|xvd[f-p])${END}`,
  },
  absolutePath: { description: "an absolute path without '..' segments", pattern: "^/" },
  dockerHost: { description: "unix:// followed by an absolute socket path", pattern: "^unix:///" },
  // At most 255 characters in all: 1 + 246 + ".service".
  systemdUnit: {
    description: "a systemd service name such as docker.service",
    pattern: `^[A-Za-z0-9_.@:][A-Za-z0-9_.@:-]{0,246}\\.service${END}`,
  },
  imageRef: {
    description: "a Docker image reference (registry[:port]/path:tag or @sha256:…)",
    pattern: `^[!-~]{1,255}${END}`,
  },
  labelPrefix: {
    description: "a label prefix matching ^[a-z0-9]+([.-][a-z0-9]+)*$",
    pattern: `^[a-z0-9]+([.-][a-z0-9]+)*${END}`,
  },
  labelKey: {
    description: "a docker label key (lower-case letters, digits, '.', '_', '-', at most 256 characters)",
    pattern: `^[a-z0-9](?:[a-z0-9._-]{0,254}[a-z0-9])?${END}`,
  },
  // No control character (Unicode category Cc: U+0000-U+001F, U+007F-U+009F).
  tagKey: {
    description: "an EC2 tag key (1 to 128 printable characters, not starting with aws:)",
    pattern: `^(?![aA][wW][sS]:)[^\\u0000-\\u001f\\u007f-\\u009f]{1,128}${END}`,
  },
  kmsKeyId: {
    description: "a KMS key: a key id (1234abcd-12ab-34cd-56ef-1234567890ab), alias/NAME, a key ARN or an alias ARN",
    pattern: `^(${KMS_KEY_ID}|${KMS_ALIAS}|${KMS_ARN}:(key/(${KMS_KEY_ID})|${KMS_ALIAS}))${END}`,
  },
  operatorTag: {
    description:
      "an EC2 tag as KEY=VALUE (key 1 to 128 characters without '=', not starting with aws: or ebs-cache:; value " +
      "up to 256 characters)",
    pattern: "^(?![aA][wW][sS]:)(?!ebs-cache:)[^=]{1,128}=",
  },
  instanceTypePool: {
    description:
      "PATTERN=POOL:SIZEGIB: an instance type with * for any characters, a pool name, a size in GiB " +
      "(g4dn.*=gpu:500)",
    pattern: `^[a-z0-9.*-]{1,64}=[A-Za-z0-9][A-Za-z0-9._-]{0,62}:[0-9]{1,5}${END}`,
  },
  // Its values are the items' `enum`: an editor completes them.
  workspaceKey: {
    description: "one of osparc's placement label keys: product-name, wallet-id, user-id, project-id, node-id",
  },
};

/** A key's schema: a JSON Schema of a scalar, or of a list of strings. */
export interface FieldSchema {
  readonly type:
    "boolean" | "string" | "number" | "integer" | "array" | readonly ["string" | "number" | "integer", "null"];
  readonly description: string;
  readonly default: unknown;
  readonly enum?: readonly string[];
  readonly minimum?: number;
  readonly maximum?: number;
  readonly "x-format"?: StringFormat;
  readonly items?: { readonly type: "string"; readonly enum?: readonly string[]; readonly "x-format"?: StringFormat };
}

/** A nested object of keys (`timeouts`, `paths`, …); no other key is allowed in it. */
export interface GroupSchema {
  readonly type: "object";
  readonly description: string;
  readonly properties: { readonly [key: string]: FieldSchema | GroupSchema };
}

export type SchemaNode = FieldSchema | GroupSchema;

export const isGroup = (node: SchemaNode): node is GroupSchema => node.type === "object";

const seconds = (what: string, default_: number) =>
  ({
    type: "number",
    minimum: 1,
    maximum: 3600,
    default: default_,
    description: `Seconds to wait for ${what}.`,
  }) as const;

const absolutePath = (default_: string, description: string) =>
  ({ type: "string", "x-format": "absolutePath", default: default_, description }) as const;

export const CONFIG_SCHEMA = {
  type: "object",
  description: "ebs-cache-agent configuration",
  properties: {
    enabled: {
      type: "boolean",
      default: true,
      description: "Run at all. false: boot reports `disabled` and exits 0 (docker keeps its own data-root).",
    },
    pool: {
      type: "string",
      "x-format": "poolName",
      default: "default",
      description: "The pool whose volumes and snapshots this host uses (volume tag `ebs-cache:pool`).",
    },
    imageSet: {
      type: ["string", "null"],
      "x-format": "imageSet",
      default: null,
      description:
        "When set, pool volumes and snapshots must carry tag `ebs-cache:image-set` with this value; null accepts " +
        "any image set.",
    },
    instanceTypePools: {
      type: "array",
      items: { type: "string", "x-format": "instanceTypePool" },
      default: [],
      description:
        "Pools by instance type, one rule a string `PATTERN=POOL:SIZEGIB` (`g4dn.*=gpu:500`): a machine whose " +
        "IMDS `instance-type` matches PATTERN (`*` for any characters) claims from POOL instead of `pool`, and " +
        "the volumes of POOL are SIZEGIB GiB (the keeper stocks each pool at its size; a boot that creates one " +
        "makes it at that size, and grows the filesystem to it). Types no rule matches use `pool` at its " +
        "snapshot's size. Patterns may not overlap, a pool has one size, and each POOL needs snapshots of its " +
        "own (`ebs-cache:pool=POOL`), at most SIZEGIB GiB. An `ebs-cache:pool` instance tag wins over the " +
        "rules. See docs/keeper.md.",
    },
    region: {
      type: ["string", "null"],
      "x-format": "region",
      default: null,
      description: "AWS region; null takes it from the instance metadata (IMDS).",
    },
    ec2Endpoint: {
      type: ["string", "null"],
      "x-format": "url",
      default: null,
      description:
        "EC2 API endpoint (a VPC endpoint, or the lab's emulator); null uses the SDK's default for the region.",
    },
    imdsEndpoint: {
      type: ["string", "null"],
      "x-format": "url",
      default: null,
      description: "Instance metadata endpoint (the lab's emulator); null uses the SDK's default.",
    },
    device: {
      type: "string",
      "x-format": "device",
      default: "/dev/sdf",
      description:
        "Device name passed to AttachVolume (on Nitro the real device is found by the volume's NVMe serial).",
    },
    volumeType: {
      type: "string",
      enum: ["gp2", "gp3", "io1", "io2", "st1", "sc1", "standard"],
      default: "gp3",
      description: "EBS volume type of volumes the agent creates.",
    },
    createFromSnapshot: {
      type: "boolean",
      default: true,
      description: "Create a volume from the pool's newest snapshot when no pool volume is available.",
    },
    initializationRateMiBps: {
      type: ["integer", "null"],
      minimum: 100,
      maximum: 300,
      default: null,
      description:
        "Volume initialization rate (MiB/s) requested for volumes created from a snapshot; null leaves blocks to " +
        "load lazily.",
    },
    volumes: {
      type: "object",
      description:
        "How the volumes the agent creates are made (a boot from the pool's snapshot or blank, and `pool fill`), " +
        "as Karpenter's EC2NodeClass `blockDeviceMappings` and `tags` (see docs/operations.md, \"Volumes as you " +
        'configure them").',
      properties: {
        encrypted: {
          type: "boolean",
          default: false,
          description:
            "Ask EC2 for an encrypted volume (`Encrypted=true`). false asks nothing: the volume is encrypted " +
            "when its snapshot is, or when the account encrypts new volumes by default.",
        },
        kmsKeyId: {
          type: ["string", "null"],
          "x-format": "kmsKeyId",
          default: null,
          description:
            "The KMS key that encrypts them (`KmsKeyId`); needs `encrypted: true`. null: the account's default " +
            "key for EBS. The instance profile needs the KMS grants of iam/ (scoped to EC2 by `kms:ViaService`).",
        },
        iops: {
          type: ["integer", "null"],
          minimum: 3000,
          maximum: 80000,
          default: null,
          description:
            "gp3 IOPS to provision (`Iops`, EC2's gp3 range), at most 500 per GiB of the volume; needs " +
            "`volumeType: gp3`. null: gp3's baseline of 3000. Above 3000 they cost extra (cost.iopsMonthUsd).",
        },
        throughputMiBps: {
          type: ["integer", "null"],
          minimum: 125,
          maximum: 2000,
          default: null,
          description:
            "gp3 throughput to provision (`Throughput`, MiB/s), at most a quarter of the IOPS (0.25 MiB/s per " +
            "IOPS); needs `volumeType: gp3`. null: gp3's baseline of 125. Above 125 it costs extra " +
            "(cost.throughputMonthUsd).",
        },
        tags: {
          type: "array",
          items: { type: "string", "x-format": "operatorTag" },
          default: [],
          description:
            `Your tags (cost allocation, ownership) as \`KEY=VALUE\`, put on every volume the agent creates, with ` +
            `its own \`ebs-cache:*\` tags: keys outside the \`ebs-cache:\` namespace and not starting with ` +
            `\`aws:\`, 1 to 128 characters, values up to ${MAX_TAG_VALUE}; at most ${MAX_OPERATOR_TAGS} (EC2 ` +
            `allows ${MAX_TAGS_PER_RESOURCE} tags on a resource, and the agent's own take up to ` +
            `${MAX_TAGS_PER_RESOURCE - MAX_OPERATOR_TAGS}). In the environment variable, comma-separated (a value ` +
            `cannot hold a comma there).`,
        },
      },
    },
    claim: {
      type: "object",
      description: "How a boot picks and claims a volume when many machines boot at once.",
      properties: {
        candidatesPerListing: {
          type: "integer",
          minimum: 5,
          maximum: 500,
          default: 50,
          description:
            "Available volumes asked of EC2 in one DescribeVolumes (one page): a boot's EC2 calls do not grow " +
            "with the pool. After losing a volume to another machine, the boot asks again for a fresh page.",
        },
        maxVolumes: {
          type: "integer",
          minimum: 1,
          maximum: 10,
          default: 3,
          description:
            "Volumes one boot may take in turn when a claimed volume turns out unusable (foreign filesystem, no " +
            "device): each is handed back, tagged `ebs-cache:last-error`, and the next candidate tried.",
        },
        maxLosses: {
          type: "integer",
          minimum: 1,
          maximum: 50,
          default: 5,
          description:
            "Claims one boot may lose to other machines (VolumeInUse) before it falls back to the snapshot or " +
            "degrades.",
        },
        quarantineHours: {
          type: "number",
          minimum: 0,
          maximum: 720,
          default: 6,
          description:
            "A volume tagged `ebs-cache:last-error` less than this long ago (tag `ebs-cache:last-error-at`) is " +
            "not a candidate; 0 turns quarantine off. `ebs-cache-agent pool` shows quarantined volumes.",
        },
      },
    },
    timeouts: {
      type: "object",
      description: "How long each wait may last before the agent gives up on it.",
      properties: {
        imdsSeconds: {
          type: "number",
          minimum: 1,
          maximum: 3600,
          default: 60,
          description:
            "Seconds to wait for the instance metadata service: the identity, and the instance profile's " +
            "credentials for EC2 (each, retries included). A node that gets no credentials in that time comes up " +
            "degraded.",
        },
        imdsRequestSeconds: {
          type: "number",
          minimum: 1,
          maximum: 3600,
          default: 5,
          description:
            "Seconds to wait for one answer of the instance metadata service (a token, a path, the credentials) " +
            "before asking again, within `timeouts.imdsSeconds`.",
        },
        attachSeconds: seconds("a volume to reach `attached` (or `available` when detaching)", 120),
        deviceSeconds: seconds("the attached volume's block device to appear", 60),
        mountHolderSeconds: {
          type: "number",
          minimum: 0,
          maximum: 120,
          default: 10,
          description:
            "Before a detach (the release, the boot's hand-back and undo): how long a copy of the volume's mount " +
            "still held in another mount namespace after the unmount is given to go (a container or a service " +
            "starting at that moment makes one) before the detach is refused and the volume stays attached. " +
            "Counted in the release's stop timeout (TimeoutStopSec=300). 0: refused at once.",
        },
        dockerSeconds: seconds("docker to start and answer on the new data-root", 120),
        bootSeconds: {
          type: "number",
          minimum: 5,
          maximum: 3600,
          default: 40,
          description:
            "The first boot phase's budget (`boot --no-docker`, before docker.service), identification included: " +
            "whatever is not done by then is undone and the node degrades, so it still joins the swarm within " +
            "the autoscaler's start-time limit (osparc's EC2_INSTANCES_MAX_START_TIME, 1 minute by default). " +
            "The start limit counted from LaunchTime (timeouts.startLimitSeconds) may end the phase earlier.",
        },
        startLimitSeconds: {
          type: "number",
          minimum: 0,
          maximum: 3600,
          default: 0,
          description:
            "The autoscaler's start-time limit, counted from the instance's EC2 LaunchTime (reset by " +
            "StartInstances), when the deployment has one: under osparc its EC2_INSTANCES_MAX_START_TIME (60 " +
            "by default there: set it to your deployment's value). The first phase then ends by LaunchTime + " +
            "this − timeouts.joinMarginSeconds (or its own budget, whichever comes first), reckoned in EC2's " +
            "time. 0 (the default: a deployment without such an autoscaler has no start limit): the budget alone.",
        },
        joinMarginSeconds: {
          type: "number",
          minimum: 0,
          maximum: 3600,
          default: 20,
          description:
            "What the start limit keeps free after the first phase: docker's start, the second phase up to the " +
            "join, the join itself and one poll of the autoscaler (osparc's AUTOSCALING_POLL_INTERVAL, 10 s). " +
            "Must be below timeouts.startLimitSeconds when that is set.",
        },
        createSeconds: {
          type: "number",
          minimum: 0,
          maximum: 3600,
          default: 20,
          description:
            "How long creating a volume from the snapshot and attaching it takes: with less of the boot budget " +
            "left, no volume is created (the node degrades instead of being undone at the deadline).",
        },
      },
    },
    paths: {
      type: "object",
      description: "Where the agent finds and puts things on the host (the lab points these into its sandbox).",
      properties: {
        byIdDir: absolutePath("/dev/disk/by-id", "udev's by-id links, watched for the attached volume's device."),
        sysfsRoot: absolutePath("/sys", "sysfs, read to confirm a device's NVMe serial."),
        mountRoot: absolutePath("/var/lib/ebs-cache", "Where cache volumes are mounted."),
        daemonJson: absolutePath(
          "/etc/docker/daemon.json",
          "dockerd's configuration file, where `data-root` and engine labels are set.",
        ),
        containerdConfig: absolutePath(
          "/etc/containerd/config.toml",
          "containerd's configuration file: on a host with the containerd image store (daemon.json " +
            "`features.containerd-snapshotter: true`) its top-level `root` is set to the volume's `containerd/` " +
            "folder, where the images are, and restored at the release.",
        ),
        dockerHost: {
          type: "string",
          "x-format": "dockerHost",
          default: "unix:///var/run/docker.sock",
          description: "The docker API socket.",
        },
        stateDir: absolutePath(
          "/var/lib/ebs-cache-agent",
          "The agent's own state (what it attached, backups of daemon.json).",
        ),
        unitsDir: absolutePath(
          "/etc/systemd/system",
          "Where the agent's systemd units are installed (`doctor` checks them and their enablement there).",
        ),
        systemdRunDir: absolutePath(
          "/run/systemd/system",
          "systemd's runtime folder: where it exists systemd runs the host (sd_booted()), and dockerd's flags " +
            "are read from `docker.unit` (`systemctl show`) and checked against daemon.json; where it does not (a " +
            "container, the lab's host folders), no unit is read and the flags are not checked.",
        ),
      },
    },
    docker: {
      type: "object",
      description: "How the agent drives docker.",
      properties: {
        control: {
          type: "string",
          enum: ["systemd", "none"],
          default: "systemd",
          description:
            "How docker is (re)started on the new data-root: `systemd` restarts the unit; `none` leaves starting " +
            "docker to systemd ordering (the agent runs Before=docker.service).",
        },
        unit: {
          type: "string",
          "x-format": "systemdUnit",
          default: "docker.service",
          description: "The systemd unit of dockerd.",
        },
        expectedImages: {
          type: "array",
          items: {
            type: "string",
            "x-format": "imageRef",
          },
          default: [],
          description:
            "Images that must be present after boot, in addition to those listed by the volume's " +
            "`ebs-cache:images` tag.",
        },
      },
    },
    labels: {
      type: "object",
      description: "The swarm labels that report readiness.",
      properties: {
        prefix: {
          type: "string",
          "x-format": "labelPrefix",
          default: "io.simcore.ebs-cache",
          description:
            "Prefix of the docker label keys the agent owns; it writes and removes nothing else. Refused when " +
            "empty, in docker's reserved namespaces (`com.docker.`, `io.docker.`, `org.dockerproject.`) or " +
            "osparc's (`io.simcore.osparc-`), or when it equals, contains or lies above a label osparc's " +
            "autoscaler sets (`io.simcore.osparc-services-ready`, `user-id`, `ec2-instance-type`, …; see " +
            "docs/labels.md) or one of `labels.protectedKeys`.",
        },
        mode: {
          type: "string",
          enum: ["auto", "node", "engine", "off"],
          default: "auto",
          description:
            "`node`: node labels through a manager's API; `engine`: daemon.json labels (work from a worker); " +
            "`auto`: node labels when a manager is reachable, engine labels otherwise; `off`: none.",
        },
        protectedKeys: {
          type: "array",
          items: {
            type: "string",
            "x-format": "labelKey",
          },
          default: [],
          description:
            "More node labels other systems set on these hosts, protected like osparc's own: list here the " +
            "autoscaler's `NODES_MONITORING_NODE_LABELS`, `NODES_MONITORING_NEW_NODES_LABELS` and instance " +
            "types' `custom_node_labels`. `labels.prefix` may not equal, contain or lie above any of them.",
        },
      },
    },
    release: {
      type: "object",
      description: "What `ebs-cache-agent release` (ExecStop of ebs-cache-agent-release.service, at shutdown) may do.",
      properties: {
        stopDocker: {
          type: "boolean",
          default: true,
          description:
            "Stop docker when it still runs on the cache volume (a release by hand; at shutdown systemd has " +
            "stopped it already). false: such a release is refused (exit 1) and nothing is changed.",
        },
      },
    },
    ttlHours: {
      type: "number",
      minimum: 1,
      maximum: 8760,
      default: 24,
      description:
        "Hours a released volume is kept (`ebs-cache:expires-at` = release time + this) before gc may delete it; " +
        "the `ebs-cache:ttl-hours` instance tag overrides it.",
    },
    workspace: {
      type: "object",
      description: "Workspace volumes: tied to a user / project / node and kept for a while after release.",
      properties: {
        labelsTag: {
          type: "string",
          "x-format": "tagKey",
          default: "io.simcore.autoscaling.ec2_instance.docker_node_labels",
          description:
            "The instance tag holding osparc's docker node labels (JSON), whole or in 256-character chunks " +
            "`<tag>_0`, `<tag>_1`, …: the workspace ids, and `<labels.prefix>.keep` / `.enabled`. A missing " +
            "chunk, bad JSON or a bad id is a warning and the pool is used.",
        },
        idKeys: {
          type: "array",
          items: {
            type: "string",
            enum: ["product-name", "wallet-id", "user-id", "project-id", "node-id"],
            "x-format": "workspaceKey",
          },
          default: ["user-id", "project-id", "node-id"],
          description:
            "The label keys (also matched as a suffix `.<key>`) that identify a workspace. A volume serves an " +
            "instance whose ids equal its own for exactly the keys present; `[]` turns workspaces off.",
        },
        minimumKeys: {
          type: "array",
          items: {
            type: "string",
            enum: ["product-name", "wallet-id", "user-id", "project-id", "node-id"],
            "x-format": "workspaceKey",
          },
          default: ["user-id"],
          description:
            "Keys that must all be among the labels for a workspace; with fewer ids the pool is used. Each must " +
            "be one of `idKeys`.",
        },
        create: {
          type: "string",
          enum: ["snapshot", "blank", "never"],
          default: "snapshot",
          description:
            "When no workspace volume exists for the ids: `snapshot` makes a pool volume their workspace in " +
            "the same claim (from the pool's newest snapshot only when the pool is empty), `blank` creates an " +
            "empty one (formatted by the agent), `never` uses the pool instead. A workspace of the ids held by " +
            "another instance: the pool, as a plain node (at most one workspace per ids).",
        },
        sizeGiB: {
          type: "integer",
          minimum: 1,
          maximum: 16384,
          default: 20,
          description:
            "Size (GiB) of a blank workspace volume; a volume from a snapshot is at least the snapshot's size.",
        },
        requireEncrypted: {
          type: "boolean",
          default: false,
          description:
            "Refuse to attach a workspace volume that is not encrypted: the node comes up `degraded` with the " +
            "reason, docker on its own data-root, and the volume is left as it is. Needs `volumes.encrypted: " +
            "true`, so that the workspace volumes the agent creates are encrypted.",
        },
        waitForLabelsTag: {
          type: "string",
          enum: ["warm-buffer", "always", "never"],
          default: "warm-buffer",
          description:
            "When the labels tag is missing at boot, wait for the instance's tags (`waitForLabelsTagSeconds`) before " +
            "using the pool: `warm-buffer` only on a stopped warm buffer started again before its activation's " +
            "tags (tag `io.simcore.autoscaling.warm_buffer_machine=true` on an instance that booted before: " +
            "osparc writes `false` and the labels in one CreateTags after StartInstances), `always` on any " +
            "instance without the labels tag, or `never`. No mode waits once `warm_buffer_machine=false` is " +
            "there (the activation came, with whatever labels it carries), nor when a pool volume is " +
            "attached here (it is reused whatever the tags say).",
        },
        waitForLabelsTagSeconds: {
          type: "number",
          minimum: 0,
          maximum: 600,
          default: 15,
          description:
            "How long a boot waits for a late labels tag (counted in the first phase's budget, timeouts.bootSeconds).",
        },
      },
    },
    prewarm: {
      type: "object",
      description:
        "The pre-warm of volumes restored from a snapshot, whose blocks load lazily from S3 (see docs/prewarm.md).",
      properties: {
        strategy: {
          type: "string",
          enum: ["off", "check", "files", "device"],
          default: "check",
          description:
            "`check`: a volume EBS says is cold (its lazy initialization under 100 %, or made from a snapshot " +
            "less than an hour ago) gets the `files` initialization, the files of the node's images first, read " +
            "from the mount on; any other a short fio sample of random reads over the allocated data gives a " +
            "verdict (label `<prefix>.prewarm=warm|cold`), and a volume it finds cold gets the same " +
            "initialization; `files`: reads the filesystem's allocated data once " +
            "(initialization), then tags the volume `ebs-cache:initialized`; `device`: AWS's documented full " +
            "read of the device; `off`: nothing. Volumes not made from a snapshot, tagged initialized, or " +
            "initialized by EBS at a provisioned rate are never read.",
        },
        background: {
          type: "boolean",
          default: true,
          description:
            "`files`/`device`: initialize after docker is up, the node labelled `warming` (usable) until done, " +
            "then `ready`; false: initialize before the node is reported ready.",
        },
        check: {
          type: "object",
          description: "The sample that gives the verdict.",
          properties: {
            seconds: {
              type: "number",
              minimum: 1,
              maximum: 300,
              default: 5,
              description: "Upper bound of the sample's duration (fio --runtime).",
            },
            reads: {
              type: "integer",
              minimum: 10,
              maximum: 1000000,
              default: 2000,
              description: "Random 4 KiB reads in the sample (fewer when the time bound comes first).",
            },
            ioDepth: {
              type: "integer",
              minimum: 1,
              maximum: 256,
              default: 16,
              description: "Reads in flight during the sample.",
            },
          },
        },
        thresholds: {
          type: "object",
          description: "When the sample says `warm`.",
          properties: {
            minIops: {
              type: "number",
              minimum: 1,
              maximum: 10000000,
              default: 1000,
              description:
                "Fewer IOPS than this in the sample: `cold` (a warm gp3 volume gives ~3000 at the sample's " +
                "depth, a cold one a few hundred).",
            },
            maxMedianLatencyMs: {
              type: ["number", "null"],
              minimum: 0.01,
              maximum: 100000,
              default: 20,
              description: "A median completion latency above this (ms): `cold`; null: latency is only reported.",
            },
          },
        },
        initialize: {
          type: "object",
          description: "The reads of the `files` and `device` strategies.",
          properties: {
            ioDepth: {
              type: "integer",
              minimum: 1,
              maximum: 256,
              default: 32,
              description: "Reads in flight (`files`; `device` always uses AWS's 32).",
            },
            maxIoKiB: {
              type: "integer",
              minimum: 4,
              maximum: 65536,
              default: 1024,
              description: "Largest single read of the `files` strategy (KiB).",
            },
            timeoutMinutes: {
              type: ["integer", "null"],
              minimum: 1,
              maximum: 10080,
              default: null,
              description:
                "Give the initialization up after this long (the volume stays untagged; `ebs-cache-agent " +
                "prewarm` resumes it); null: no limit.",
            },
            progressSeconds: {
              type: "integer",
              minimum: 1,
              maximum: 3600,
              default: 10,
              description: "Seconds between progress lines in the log and updates of the state file.",
            },
          },
        },
        giveWay: {
          type: "object",
          description:
            "How the background initialization (`files`) gives way to others' reads of the volume, such as a " +
            "service starting: a device serves reads in arrival order, so fio is stopped (SIGSTOP) every " +
            "`runMs` and stays stopped while others read or write, and `settleMs` after.",
          properties: {
            enabled: {
              type: "boolean",
              default: true,
              description:
                "false: the background run reads as an inline initialization does (`initialize.ioDepth` in " +
                "flight, never stopped), finishing sooner while a service's first reads wait behind it: for " +
                "nodes that start nothing on the volume before it is initialized.",
            },
            runMs: {
              type: "integer",
              minimum: 10,
              maximum: 60000,
              default: 250,
              description:
                "How long fio reads between two looks at the device (its reads in flight done, the device's " +
                "counters over `pauseMs`); a service's read waits behind at most one such period.",
            },
            pauseMs: {
              type: "integer",
              minimum: 10,
              maximum: 10000,
              default: 100,
              description:
                "How long one look at the device lasts; while others read, fio stays stopped and the device is " +
                "looked at again every `pauseMs`.",
            },
            maxPausedMs: {
              type: "integer",
              minimum: 10,
              maximum: 600000,
              default: 5000,
              description:
                "Stopped this long in a row, fio reads `runMs` anyway, so that a node whose services never stop " +
                "reading still gets its volume initialized; at least `pauseMs`.",
            },
            settleMs: {
              type: "integer",
              minimum: 0,
              maximum: 600000,
              default: 1000,
              description:
                "Once stopped for others, fio stays stopped until the device has had none of their reads or " +
                "writes for this long: a service's start comes in bursts of reads with gaps of CPU work between " +
                "them (container create, the runtime, the process's own start), and continuing in a gap puts " +
                "its next reads behind the pre-warm's. `maxPausedMs` still bounds the stop.",
            },
            othersIops: {
              type: "number",
              minimum: 0,
              maximum: 1000000,
              default: 0,
              description:
                "Others' reads and writes per second (requests, whatever their size) up to which the device " +
                "counts as quiet. 0: any read or write of others keeps fio stopped (a service starting reads " +
                "little but often). Raise it on nodes whose services touch the volume all the time.",
            },
          },
        },
      },
    },
    keeper: {
      type: "object",
      description:
        "The pool keeper (`ebs-cache-agent pool fill`, ebs-cache-agent-keeper.timer): keeps the pool's zones " +
        "stocked with available volumes made from its newest snapshot (see docs/keeper.md).",
      properties: {
        zones: {
          type: "array",
          items: { type: "string", "x-format": "availabilityZone" },
          default: [],
          description:
            "The availability zones the keeper stocks (those the autoscaler launches machines in); empty: `pool " +
            "fill` refuses to run.",
        },
        minAvailable: {
          type: "integer",
          minimum: 0,
          maximum: 1000,
          default: 2,
          description:
            "Available volumes (creating ones included) the keeper keeps in each zone: fewer, and it creates " +
            "volumes, within `maxVolumes` and `maxGiB`.",
        },
        maxAvailable: {
          type: "integer",
          minimum: 0,
          maximum: 1000,
          default: 4,
          description:
            "Available volumes beyond this in a zone are deleted, oldest snapshot first, then oldest volume; " +
            "never one in use, kept (`ebs-cache:keep=true`), quarantined, or not managed. At least " +
            "`minAvailable`.",
        },
        maxVolumes: {
          type: "integer",
          minimum: 1,
          maximum: 10000,
          default: 20,
          description:
            "Hard cap on the pool's volumes in all zones and every state (in use included): the keeper creates " +
            "none beyond it.",
        },
        maxGiB: {
          type: "integer",
          minimum: 1,
          maximum: 10000000,
          default: 2000,
          description:
            "Hard cap on the pool's provisioned GiB in all zones and every state: the keeper creates no volume " +
            "that would exceed it.",
        },
        initializationRateMiBps: {
          type: ["integer", "null"],
          minimum: 100,
          maximum: 300,
          default: 100,
          description:
            "VolumeInitializationRate (MiB/s) of the volumes the keeper creates: EBS loads every block from the " +
            "snapshot at this rate with no instance attached, and the keeper tags the volume " +
            "`ebs-cache:initialized` once EBS reports 100 %; null: blocks load lazily on first read.",
        },
        reclaimStoppedAfterDays: {
          type: ["integer", "null"],
          minimum: 1,
          maximum: 365,
          default: null,
          description:
            "Opt-in: the keeper detaches (never forced) a pool volume from an instance that EC2 says has been " +
            "`stopped` for longer than this many days (a sleeping warm buffer, a leaked stopped machine: " +
            "osparc-simcore #7342, #7063), after checking again right before the DetachVolume that the instance " +
            "is still `stopped`, and tags it released (`ttlHours`), so it is pool stock again. The instance's " +
            "next start finds no volume and claims another. Needs DetachVolume from other instances in the " +
            "keeper host's role (docs/keeper.md); null: never (the default). Workspace volumes are never " +
            "reclaimed.",
        },
      },
    },
    cost: {
      type: "object",
      description:
        "Prices for the estimated monthly cost `ebs-cache-agent pool` shows (see docs/keeper.md). The defaults " +
        "are AWS's us-east-1 list prices for gp3 volumes and standard snapshots: set your region's (the AWS EBS " +
        "pricing page). An estimate, not a bill: no discounts, taxes or partial months.",
      properties: {
        gibMonthUsd: {
          type: "number",
          minimum: 0,
          maximum: 100,
          default: 0.08,
          description:
            "USD per provisioned GiB-month of a volume (gp3's us-east-1 list price). Volumes of another type are " +
            "priced per GiB at this price too, and `pool` says so beside them.",
        },
        iopsMonthUsd: {
          type: "number",
          minimum: 0,
          maximum: 100,
          default: 0.005,
          description: "USD per provisioned IOPS-month of a gp3 volume above its free 3000 (us-east-1 list price).",
        },
        throughputMonthUsd: {
          type: "number",
          minimum: 0,
          maximum: 100,
          default: 0.04,
          description:
            "USD per provisioned MiB/s-month of a gp3 volume's throughput above its free 125 (us-east-1 list price).",
        },
        snapshotGibMonthUsd: {
          type: "number",
          minimum: 0,
          maximum: 100,
          default: 0.05,
          description:
            "USD per GiB-month of a snapshot in the standard tier (us-east-1 list price). `pool` counts each " +
            "completed snapshot at its volume size: an upper bound, since EBS bills only the blocks a snapshot " +
            "stores.",
        },
      },
    },
    refresh: {
      type: "object",
      description:
        'The background refresh after `ready` (see docs/operations.md, "Volumes that stay current"): pulls the ' +
        "images of the pool's current generation, and those of osparc's `pre_pulled_images` instance tag, that " +
        "the volume lacks, so the volume goes back to the pool current. A failing pull is a warning: readiness " +
        "never changes.",
      properties: {
        enabled: {
          type: "boolean",
          default: false,
          description:
            "Run the refresh after a boot that reported `ready` (or `warming`) on a pool volume. Off by default: " +
            "pulls cost registry bandwidth and need the host's registry credentials (docker's own, e.g. `docker " +
            "login` or a credential helper), which only the operator knows are there. Workspace volumes are " +
            "never refreshed: their content is the user's.",
        },
        concurrency: {
          type: "integer",
          minimum: 1,
          maximum: 2,
          default: 1,
          description:
            "Pulls at once. One keeps the bandwidth for the services the node starts; two when the registry is near.",
        },
        pullSeconds: {
          type: "number",
          minimum: 10,
          maximum: 7200,
          default: 1800,
          description:
            "Longest time one pull may take; past it the pull is stopped and counted failed, and the next image " +
            "is pulled.",
        },
        prePulledImagesTag: {
          type: ["string", "null"],
          "x-format": "tagKey",
          default: "io.simcore.autoscaling.pre_pulled_images",
          description:
            "The instance tag holding osparc's list of images to pre-pull (a JSON array; osparc's " +
            "`INSTANCE_PRE_PULLED_IMAGES_EC2_TAG_KEY`), whole or in 256-character chunks `<tag>_0`, `<tag>_1`, …; " +
            "its images are pulled too. A missing chunk or bad JSON is one warning and the tag is skipped; " +
            "osparc's buffer tags without the list (or osparc's key beside another configured one) are a " +
            "warning too. null: not read.",
        },
      },
    },
    gc: {
      type: "object",
      description: 'What `ebs-cache-agent gc` deletes besides expired volumes (see docs/operations.md, "gc").',
      properties: {
        supersededGraceHours: {
          type: ["number", "null"],
          minimum: 0,
          maximum: 8760,
          default: 24,
          description:
            "Hours a pool's current generation (its newest completed snapshot, `ebs-cache:built-at`) is out " +
            "before gc deletes the available pool volumes of older generations, counted from that snapshot's " +
            "start or build time, whichever is later; never a volume in use, kept, in quarantine, never " +
            "released, or a workspace volume. null: gc never retires a volume for its generation.",
        },
      },
    },
    prune: {
      type: "object",
      description:
        "Keeps a pool or workspace volume's filesystem from filling up: after each boot that came up, every hour " +
        "while the node runs, and with `ebs-cache-agent prune`, images outside the pool's current generation are " +
        "removed (never an image a container uses or one osparc's `pre_pulled_images` instance tag lists, never " +
        "anything but images; see docs/operations.md).",
      properties: {
        afterBoot: {
          type: "boolean",
          default: true,
          description:
            "Run the prune in the background after a boot that came up (`ready`, `warming`) on a cache " +
            "filesystem fuller than `thresholdPercent`; it never changes readiness or the boot's exit code.",
        },
        periodic: {
          type: "boolean",
          default: true,
          description:
            "Let `ebs-cache-agent-prune.timer` run the prune every hour while the node runs (`prune --timer`): a " +
            "node that runs for days (a hot buffer, a long session) keeps pulling images, and its pool volume " +
            "fills up. false: the timer's runs do nothing.",
        },
        thresholdPercent: {
          type: "integer",
          minimum: 1,
          maximum: 100,
          default: 85,
          description:
            "Prune only when the cache filesystem is fuller than this (percent of used + available, as df counts it).",
        },
        targetPercent: {
          type: "integer",
          minimum: 0,
          maximum: 99,
          default: 75,
          description:
            "Remove images, oldest first, until the fill is estimated at or below this; below `thresholdPercent`.",
        },
      },
    },
    metrics: {
      type: "object",
      description: "What the agent leaves for Prometheus (see docs/metrics.md).",
      properties: {
        textfileDir: {
          type: ["string", "null"],
          "x-format": "absolutePath",
          default: "/var/lib/prometheus/node-exporter",
          description:
            "node_exporter's textfile collector folder, where each use case replaces its " +
            "`ebs_cache_agent_<use-case>.prom`; null writes no metrics.",
        },
      },
    },
    logLevel: {
      type: "string",
      enum: ["error", "warning", "notice", "info", "debug"],
      default: "info",
      description: "The most verbose journald priority that is logged.",
    },
  },
} as const satisfies GroupSchema;

/** The value type a JSON Schema of this file describes. */
type ValueOf<S> = S extends { type: "object"; properties: infer P }
  ? { readonly [K in keyof P]: ValueOf<P[K]> }
  : S extends { enum: readonly (infer V)[] }
    ? V
    : S extends { type: "array" }
      ? readonly string[]
      : S extends { type: readonly (infer T)[] }
        ? ScalarOf<T>
        : S extends { type: infer T }
          ? ScalarOf<T>
          : never;

type ScalarOf<T> = T extends "string"
  ? string
  : T extends "number" | "integer"
    ? number
    : T extends "boolean"
      ? boolean
      : T extends "null"
        ? null
        : never;

/** The validated configuration (defaults < file < environment). */
export type AgentConfig = ValueOf<typeof CONFIG_SCHEMA>;

/** The pre-warm strategies: this enum is the one list of them. */
export const PREWARM_STRATEGIES = CONFIG_SCHEMA.properties.prewarm.properties.strategy.enum;
export type PrewarmStrategy = (typeof PREWARM_STRATEGIES)[number];

export const DEFAULT_CONFIG_PATH = "/etc/ebs-cache-agent/config.json";
/** Names the config file (when the caller gives no path). Not a config key. */
export const CONFIG_PATH_ENV = "EBS_CACHE_AGENT_CONFIG";
export const ENV_PREFIX = "EBS_CACHE_AGENT_";
/** The top-level key that names the config's JSON Schema for editors; the agent ignores its value. */
export const SCHEMA_KEY = "$schema";

/** One leaf key of the schema, with where it sits and the environment variable that overrides it. */
export interface ConfigKey {
  /** Dotted JSON path: `timeouts.deviceSeconds`. */
  readonly path: string;
  readonly segments: readonly string[];
  readonly field: FieldSchema;
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

function flatten(group: GroupSchema, prefix: readonly string[]): ConfigKey[] {
  return Object.entries(group.properties).flatMap(([name, node]) => {
    const segments = [...prefix, name];
    if (isGroup(node)) return flatten(node, segments);
    return [{ path: segments.join("."), segments, field: node, envVar: envVarName(segments) }];
  });
}

/** Every leaf key, in schema order. */
export const CONFIG_KEYS: readonly ConfigKey[] = flatten(CONFIG_SCHEMA, []);

/** The default of a key or group, as a fresh value (lists and objects are not shared). */
function defaultOf(node: SchemaNode): unknown {
  if (isGroup(node))
    return Object.fromEntries(Object.entries(node.properties).map(([name, child]) => [name, defaultOf(child)]));
  return Array.isArray(node.default) ? [...(node.default as unknown[])] : node.default;
}

/** A fresh copy of the defaults (callers may keep it; nothing shares it). */
export function defaultConfig(): AgentConfig {
  return defaultOf(CONFIG_SCHEMA) as AgentConfig;
}

/** How a key's value is read from the environment and described. */
type FieldKind = "boolean" | "number" | "enum" | "string" | "stringList";

export function kindOf(field: FieldSchema): FieldKind {
  if (field.enum) return "enum";
  const type = typeof field.type === "string" ? field.type : field.type[0];
  return type === "array" ? "stringList" : type === "integer" ? "number" : type;
}

export const isNullable = (field: FieldSchema): boolean =>
  typeof field.type !== "string" && field.type.includes("null");

/** What a list item accepts, as the end of "must be …". */
export function itemExpectationOf(field: FieldSchema): string {
  const format = field.items?.["x-format"];
  return format ? FORMATS[format].description : "a string";
}

/** What a field accepts, as the end of "must be …". */
export function expectationOf(field: FieldSchema): string {
  const orNull = isNullable(field) ? ", or null" : "";
  const format = field["x-format"];
  switch (kindOf(field)) {
    case "boolean":
      return "a boolean (true or false)";
    case "number": {
      const integer = field.type === "integer" || (typeof field.type !== "string" && field.type.includes("integer"));
      return `${integer ? "an integer" : "a number"} between ${field.minimum} and ${field.maximum}${orNull}`;
    }
    case "enum":
      return `one of ${field.enum!.map((v) => JSON.stringify(v)).join(", ")}`;
    case "string":
      return `${format ? FORMATS[format].description : "a string"}${orNull}`;
    case "stringList":
      return `a list of ${field.items?.["x-format"] ? `strings, each ${itemExpectationOf(field)}` : "strings"}`;
  }
}

/** What ajv needs besides the standard keywords (see scripts/config-schema.ts). */
export const SCHEMA_ANNOTATIONS = ["x-format", "patternErrorMessage"] as const;

/**
 * The schema as shipped (config/config.schema.json) and compiled: every group closed to other
 * keys, each format's pattern filled in (with the message VS Code shows when it fails), and the
 * top-level `$schema` key allowed.
 */
export function shippedSchema(): Record<string, unknown> {
  const withFormat = (node: { "x-format"?: StringFormat }) => {
    const format = node["x-format"];
    const pattern = format ? FORMATS[format].pattern : undefined;
    return pattern ? { ...node, pattern, patternErrorMessage: `must be ${FORMATS[format!].description}` } : node;
  };
  const expand = (node: SchemaNode): Record<string, unknown> => {
    if (isGroup(node)) {
      const properties = Object.fromEntries(
        Object.entries(node.properties).map(([name, child]) => [name, expand(child)]),
      );
      return { type: "object", description: node.description, additionalProperties: false, properties };
    }
    return node.items ? { ...node, items: withFormat(node.items) } : withFormat(node);
  };
  const root = expand(CONFIG_SCHEMA);
  return {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    title: "ebs-cache-agent configuration",
    ...root,
    properties: {
      [SCHEMA_KEY]: {
        type: "string",
        description:
          "The JSON Schema of this file, for editors (./config.schema.json beside it); the agent ignores it.",
      },
      ...(root.properties as object),
    },
  };
}
