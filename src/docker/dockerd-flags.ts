/**
 * dockerd's command-line flags against the daemon.json the agent is about to write, as pure
 * functions: which flags are set, and which of them would make dockerd refuse to start or read
 * another file than the one the agent edits.
 *
 * The rule is dockerd's own (moby daemon/config `findConfigurationConflicts`, the same from
 * 20.10 to 29): a directive given both as a flag and in the configuration file is refused,
 * "the following directives are specified both as a flag and in the configuration file: …",
 * at start and at every reload. Nothing is merged and neither side wins, labels included
 * (`--label` vs `labels`); the one exemption is `--add-runtime` vs `runtimes`. The file's
 * keys are compared after one level of nested objects is flattened (`"proxies": {"http-proxy"}`
 * counts as `http-proxy`), except the objects dockerd keeps whole (`features`, `log-opts`, …).
 * A flag matches a key by its long name, its one-letter shorthand, or, for list and map flags
 * (`--label`), the plural name dockerd gives the key (`labels`).
 */

/** One argument of dockerd's effective command line, and where it was written. */
export interface DockerdArg {
  value: string;
  /**
   * Where it comes from, worded to follow "remove … from": `ExecStart in /etc/systemd/system/
   * docker.service.d/x.conf`, `DOCKER_OPTS in /etc/default/docker (EnvironmentFile of docker.service)`.
   */
  origin: string;
}

/** dockerd's effective command line, and what was wrong in reading it. */
export interface DockerdCommand {
  /** What starts dockerd (`docker.service`, the lab's private dockerd). */
  source: string;
  /** The arguments after dockerd's own path, expanded as systemd expands them. */
  args: DockerdArg[];
  /** Problems that stop docker from starting whatever the agent does (an EnvironmentFile= that is missing). */
  problems: HostProblem[];
  /** Set when the command line could not be known at all (no systemd runs this host): why. Nothing is checked then. */
  unknown?: string;
}

/** Something on the host that would make the switch fail; nothing was changed. */
export interface HostProblem {
  problem: string;
  remediation: string;
  /** The daemon.json key a flag conflicts with, for a flag conflict. */
  key?: string;
}

/** A flag set on the command line. */
export interface DockerdFlag {
  /** The long name (`data-root`), or the shorthand letter when dockerd has no long name for it here. */
  name: string;
  /** As written: `--data-root=/x`, `-g /x`. */
  spelled: string;
  value: string | undefined;
  origin: string;
}

/** dockerd's configuration file when no --config-file is given (rootful dockerd on Linux). */
export const DEFAULT_CONFIG_FILE = "/etc/docker/daemon.json";

/** Shorthand letter → long name (dockerd 20.10 to 29). */
const SHORTHANDS: Record<string, string> = {
  D: "debug",
  H: "host",
  G: "group",
  l: "log-level",
  p: "pidfile",
  s: "storage-driver",
  b: "bridge",
  g: "graph",
  r: "restart",
  v: "version",
  h: "help",
};

/** Flags that take no value: the word after them is not theirs. */
const BOOLEAN_FLAGS = new Set([
  "debug",
  "tls",
  "tlsverify",
  "experimental",
  "iptables",
  "ip6tables",
  "ip-forward",
  "ip-forward-no-drop",
  "ip-masq",
  "ipv6",
  "icc",
  "userland-proxy",
  "live-restore",
  "init",
  "selinux-enabled",
  "no-new-privileges",
  "raw-logs",
  "rootless",
  "cri-containerd",
  "validate",
  "version",
  "help",
  "restart",
  "allow-direct-routing",
  "disable-legacy-registry",
]);

/** List and map flags whose daemon.json key has another name (moby `opts.NamedOption`). */
const NAMED_OPTIONS: Record<string, string> = {
  label: "labels",
  host: "hosts",
  "registry-mirror": "registry-mirrors",
  "insecure-registry": "insecure-registries",
  "storage-opt": "storage-opts",
  "authorization-plugin": "authorization-plugins",
  "exec-opt": "exec-opts",
  feature: "features",
  "default-network-opt": "default-network-opts",
  "dns-opt": "dns-opts",
  "host-gateway-ip": "host-gateway-ips",
  "log-opt": "log-opts",
  "node-generic-resource": "node-generic-resources",
  "cdi-spec-dir": "cdi-spec-dirs",
  "cluster-store-opt": "cluster-store-opts",
  "default-ulimit": "default-ulimits",
  "add-runtime": "runtimes",
};

/** Keys both sides may set (moby `skipDuplicates`). */
const MERGED_KEYS = new Set(["runtimes"]);

/** daemon.json objects dockerd does not flatten (moby `flatOptions`). */
const WHOLE_OBJECTS = new Set([
  "cluster-store-opts",
  "default-network-opts",
  "log-opts",
  "runtimes",
  "default-ulimits",
  "features",
  "builder",
  "nri-opts",
]);

/** The daemon.json keys the agent writes; a flag for one of them must go, not the key. */
export const AGENT_KEYS = ["data-root", "labels", "features"] as const;

/**
 * The flags set on a dockerd command line, in order. `--name=value`, `--name value`, `-H value`,
 * `-Hvalue`, `-H=value` and clusters of one-letter booleans (`-D`) are understood; dockerd takes
 * no positional arguments, so a word that is not a flag is the value of the flag before it.
 */
export function parseDockerdFlags(args: readonly DockerdArg[]): DockerdFlag[] {
  const flags: DockerdFlag[] = [];
  for (let i = 0; i < args.length; i += 1) {
    const arg = args[i]!;
    const next = args[i + 1];
    const takesNext = (name: string) => !BOOLEAN_FLAGS.has(name) && next !== undefined && !next.value.startsWith("-");
    if (arg.value === "--") break;
    if (arg.value.startsWith("--")) {
      const body = arg.value.slice(2);
      const eq = body.indexOf("=");
      const name = eq >= 0 ? body.slice(0, eq) : body;
      if (eq >= 0) {
        flags.push({ name, spelled: arg.value, value: body.slice(eq + 1), origin: arg.origin });
      } else if (takesNext(name)) {
        flags.push({ name, spelled: `${arg.value} ${next!.value}`, value: next!.value, origin: arg.origin });
        i += 1;
      } else {
        flags.push({ name, spelled: arg.value, value: undefined, origin: arg.origin });
      }
      continue;
    }
    if (arg.value.startsWith("-") && arg.value.length > 1) {
      // A cluster of shorthands: booleans until the first letter that takes a value.
      const letters = arg.value.slice(1);
      for (let j = 0; j < letters.length; j += 1) {
        const letter = letters[j]!;
        const name = SHORTHANDS[letter] ?? letter;
        const rest = letters.slice(j + 1).replace(/^=/, "");
        if (BOOLEAN_FLAGS.has(name)) {
          flags.push({ name, spelled: `-${letter}`, value: undefined, origin: arg.origin });
          continue;
        }
        if (rest !== "") {
          flags.push({ name, spelled: arg.value, value: rest, origin: arg.origin });
        } else if (takesNext(name)) {
          flags.push({ name, spelled: `-${letter} ${next!.value}`, value: next!.value, origin: arg.origin });
          i += 1;
        } else {
          flags.push({ name, spelled: `-${letter}`, value: undefined, origin: arg.origin });
        }
        break;
      }
    }
    // A bare word with no flag before it: dockerd would refuse it ("accepts no arguments").
  }
  return flags;
}

/** The daemon.json key a flag competes with. */
export function configKeyOf(flag: string): string {
  return NAMED_OPTIONS[flag] ?? flag;
}

/** daemon.json's keys as dockerd compares them with flags: one level of objects flattened. */
export function flattenedKeys(config: Record<string, unknown>): Set<string> {
  const keys = new Set<string>();
  for (const [key, value] of Object.entries(config)) {
    if (value !== null && typeof value === "object" && !Array.isArray(value) && !WHOLE_OBJECTS.has(key)) {
      for (const inner of Object.keys(value)) keys.add(inner);
    } else {
      keys.add(key);
    }
  }
  return keys;
}

/** What the conflict check needs besides the command line and the file. */
export interface FlagCheckOptions {
  /** The daemon.json the agent edits (for messages). */
  daemonJsonPath: string;
  /** Whether the file dockerd reads (`--config-file`, or the default) is the agent's. */
  readsAgentFile: boolean;
  /** The keys the agent will write in this run (a subset of AGENT_KEYS). */
  agentKeys: readonly string[];
  /** What starts dockerd, for messages (`docker.service`). */
  source: string;
}

/** The file dockerd reads: the last --config-file, or the default. */
export function configFileOf(flags: readonly DockerdFlag[]): { path: string; flag?: DockerdFlag } {
  const flag = flags.filter((f) => f.name === "config-file").at(-1);
  return flag?.value !== undefined ? { path: flag.value, flag } : { path: DEFAULT_CONFIG_FILE };
}

/**
 * Everything in dockerd's command line that would keep the switch from working, each with a
 * true remediation: a flag for a key of daemon.json (the one the agent will write, `planned`),
 * the legacy `-g`/`--graph`, a --config-file other than the agent's daemon.json.
 */
export function dockerdFlagProblems(
  flags: readonly DockerdFlag[],
  planned: Record<string, unknown>,
  options: FlagCheckOptions,
): HostProblem[] {
  const problems: HostProblem[] = [];
  const path = options.daemonJsonPath;
  const { path: configFile, flag: configFlag } = configFileOf(flags);
  if (!options.readsAgentFile) {
    problems.push({
      problem: configFlag
        ? `dockerd reads ${configFile} (${configFlag.spelled}, ${configFlag.origin}), not ${path}: it would never ` +
          `see the agent's data-root and labels`
        : `dockerd reads ${DEFAULT_CONFIG_FILE} (no --config-file in ${options.source}), not ${path}: it would ` +
          `never see the agent's data-root and labels`,
      remediation: configFlag
        ? `remove ${configFlag.spelled} from ${configFlag.origin}, or set paths.daemonJson in the agent's config ` +
          `to ${configFile}`
        : `set paths.daemonJson in the agent's config to ${DEFAULT_CONFIG_FILE}, or give dockerd --config-file ${path}`,
    });
  }
  const keys = flattenedKeys(planned);
  const reported = new Set<string>();
  for (const flag of flags) {
    if (flag.name === "graph" || flag.name === "g") {
      problems.push({
        problem:
          `${flag.spelled} (${flag.origin}) sets docker's data-root the legacy way: dockerd 20.10 lets ` +
          `daemon.json's data-root win silently, 23 refuses -g, 24 and later do not know it`,
        remediation: `remove ${flag.spelled} from ${flag.origin}: the agent sets "data-root" in ${path}`,
      });
      continue;
    }
    const key = configKeyOf(flag.name);
    const letter = NAMED_OPTIONS[flag.name] === undefined ? SHORT_KEY[flag.name] : undefined;
    const spelledKey = keys.has(key) ? key : letter !== undefined && keys.has(letter) ? letter : undefined;
    if (spelledKey === undefined || MERGED_KEYS.has(spelledKey) || reported.has(`${spelledKey}\0${flag.spelled}`))
      continue;
    reported.add(`${spelledKey}\0${flag.spelled}`);
    const agents = options.agentKeys.includes(spelledKey);
    problems.push({
      key: spelledKey,
      problem:
        `${flag.spelled} (${flag.origin}) and "${spelledKey}" in ${path}${agents ? " (the agent sets it)" : ""}: ` +
        `dockerd refuses to start when a directive is given both as a flag and in its configuration file`,
      remediation: agents
        ? `remove ${flag.spelled} from ${flag.origin}: the agent owns "${spelledKey}" in ${path}`
        : `remove ${flag.spelled} from ${flag.origin}, or "${spelledKey}" from ${path} (dockerd takes one or the ` +
          `other, never both)`,
    });
  }
  return problems;
}

/** dockerd also compares a flag's shorthand letter with the file's keys (`"s": "vfs"` vs `-s`). */
const SHORT_KEY: Record<string, string> = Object.fromEntries(
  Object.entries(SHORTHANDS).map(([letter, name]) => [name, letter]),
);

/**
 * The engine-label check of the reporter: a `--label` flag makes dockerd refuse daemon.json's
 * `labels` (at the reload, and at its next start), so engine labels must not be written at all.
 */
export async function engineLabelsProblem(deps: {
  dockerdCommand(): Promise<DockerdCommand>;
  daemonJsonPath: string;
}): Promise<HostProblem | undefined> {
  const command = await deps.dockerdCommand();
  if (command.unknown !== undefined) return undefined;
  const flags = parseDockerdFlags(command.args);
  return dockerdFlagProblems(
    flags,
    { labels: [] },
    {
      daemonJsonPath: deps.daemonJsonPath,
      readsAgentFile: true,
      agentKeys: ["labels"],
      source: command.source,
    },
  ).find((p) => p.key === "labels");
}
