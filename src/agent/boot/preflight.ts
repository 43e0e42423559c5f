/**
 * The host checks run before a boot claims anything: everything on this host that would make
 * the data-root switch fail is found while no volume is attached, so a good pool volume is
 * never claimed, blamed (`last-error`) and handed back for a fault of the host. A refusal
 * changes nothing: the boot degrades with the reason and its remediation.
 *
 * Checked: daemon.json parses (a file that does not keep failing the same way as before: left
 * byte-for-byte unchanged), holds no key the switch refuses or dockerd would refuse next to the
 * agent's keys, and dockerd's effective command line (unit, drop-ins, environment files) sets
 * no flag for a key of that file (dockerd refuses a directive given both ways) and reads that
 * very file (`--config-file`).
 */
import { realpath } from "node:fs/promises";
import { resolve } from "node:path";
import { AgentError, ExitCode } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import type { DaemonJson } from "../../docker/daemon-json.ts";
import {
  AGENT_KEYS,
  configFileOf,
  dockerdFlagProblems,
  parseDockerdFlags,
  type DockerdCommand,
  type HostProblem,
} from "../../docker/dockerd-flags.ts";
import { isUnderPrefix, parseEngineLabel, type LabelModeSetting } from "../../docker/labels.ts";
import { engineMajorVersion } from "../../engine-version.ts";

/** The host would refuse the switch; nothing was changed and no volume was claimed. */
export class PreflightError extends AgentError {
  readonly problems: HostProblem[];

  constructor(problems: HostProblem[]) {
    super(
      `this host would refuse the data-root switch: ${problems.map((p) => p.problem).join("; ")}`,
      problems.map((p) => p.remediation).join("; "),
      ExitCode.degraded,
    );
    this.problems = problems;
  }
}

export interface PreflightDeps {
  /** The daemon.json the agent edits. */
  daemonJsonPath: string;
  /** It, parsed; throws DaemonJsonError when it does not parse (then nothing else is checked). */
  readDaemonJson(): Promise<DaemonJson>;
  /** dockerd's effective command line (systemd's unit, or the lab's dockerd). */
  dockerdCommand(): Promise<DockerdCommand>;
  /** The installed dockerd's version, when known (docker 29+ makes the agent write `features`). */
  dockerVersion(): Promise<string | undefined>;
  labels: { prefix: string; mode: LabelModeSetting };
  log: Logger;
}

/** The daemon.json keys this run may write. */
export function agentKeysFor(labelMode: LabelModeSetting, engineVersion: string | undefined): string[] {
  const major = engineMajorVersion(engineVersion) ?? NaN;
  return AGENT_KEYS.filter(
    (key) => key === "data-root" || (key === "labels" ? labelMode === "auto" || labelMode === "engine" : major >= 29),
  );
}

/** daemon.json as it will be after the switch, for the keys dockerd compares (values do not matter). */
export function plannedDaemonJson(current: DaemonJson, agentKeys: readonly string[]): DaemonJson {
  const planned: DaemonJson = { ...current };
  for (const key of agentKeys) planned[key] ??= key === "labels" ? [] : key === "features" ? {} : "";
  return planned;
}

/**
 * Keys of daemon.json the switch refuses, or that dockerd would refuse once the agent's keys
 * are in: the legacy `graph` (20.10 refuses it next to `data-root`, 23 refuses it, 24+ does not
 * know it), a `data-root` that is not a string, `labels` that are not `key=value` strings or
 * give one key two values (dockerd refuses both, at start and at reload), a `features` that is
 * not an object.
 */
export function daemonJsonProblems(
  config: DaemonJson,
  path: string,
  options: { agentKeys: readonly string[]; prefix: string },
): HostProblem[] {
  const problems: HostProblem[] = [];
  if (config.graph !== undefined) {
    problems.push({
      problem:
        `${path} sets the legacy "graph" key: dockerd refuses it next to the "data-root" the agent writes (and 23+ ` +
        `refuse it alone)`,
      remediation: `rename "graph" to "data-root" in ${path}`,
    });
  }
  if (config["data-root"] !== undefined && typeof config["data-root"] !== "string") {
    problems.push({
      problem: `${path}: "data-root" is not a string`,
      remediation: `fix "data-root" in ${path} by hand`,
    });
  }
  const labels = config.labels;
  if (labels !== undefined) {
    if (!Array.isArray(labels) || labels.some((entry) => typeof entry !== "string")) {
      problems.push({
        problem: `${path}: "labels" is not an array of "key=value" strings`,
        remediation: `fix "labels" in ${path} by hand`,
      });
    } else {
      problems.push(...labelProblems(labels as string[], path, options.prefix));
    }
  }
  const features = config.features;
  if (features !== undefined && (features === null || typeof features !== "object" || Array.isArray(features))) {
    problems.push({
      problem: `${path}: "features" is not an object`,
      remediation: `fix "features" in ${path} by hand`,
    });
  }
  return problems;
}

/** The labels dockerd refuses (moby opts.ValidateLabel, GetConflictFreeLabels), outside the agent's prefix. */
function labelProblems(labels: readonly string[], path: string, prefix: string): HostProblem[] {
  const problems: HostProblem[] = [];
  const seen = new Map<string, string>();
  for (const label of labels) {
    const { key, value } = parseEngineLabel(label);
    if (isUnderPrefix(prefix, key)) continue; // the agent replaces its own
    if (value === undefined) {
      problems.push({
        problem: `${path}: label ${JSON.stringify(label)} is not key=value (dockerd refuses it)`,
        remediation: `fix "labels" in ${path}`,
      });
      continue;
    }
    if (/^(com\.docker\.|io\.docker\.|org\.dockerproject\.)/i.test(label)) {
      problems.push({
        problem: `${path}: label ${key} is in a namespace docker reserves (dockerd refuses it)`,
        remediation: `remove ${key} from "labels" in ${path}`,
      });
    }
    const before = seen.get(key);
    if (before !== undefined && before !== value) {
      problems.push({
        problem: `${path}: label ${key} is given two values (dockerd refuses conflicting labels)`,
        remediation: `keep one ${key} in "labels" in ${path}`,
      });
    }
    seen.set(key, value);
  }
  return problems;
}

/**
 * Runs the checks; throws the DaemonJsonError of a file that does not parse as it is (the file
 * is left alone, as before), or a PreflightError listing every problem found.
 */
export async function preflightHost(deps: PreflightDeps): Promise<void> {
  const config = await deps.readDaemonJson();
  const engineVersion = await deps.dockerVersion().catch(() => undefined);
  const agentKeys = agentKeysFor(deps.labels.mode, engineVersion);
  const problems = daemonJsonProblems(config, deps.daemonJsonPath, { agentKeys, prefix: deps.labels.prefix });
  const command = await deps.dockerdCommand();
  if (command.unknown !== undefined) {
    deps.log.warning("boot.preflight", `dockerd's flags not checked: ${command.unknown}`);
    if (problems.length > 0) throw new PreflightError(problems);
    return;
  }
  problems.push(...command.problems);
  const flags = parseDockerdFlags(command.args);
  const readsAgentFile = await sameFile(configFileOf(flags).path, deps.daemonJsonPath);
  problems.push(
    ...dockerdFlagProblems(flags, plannedDaemonJson(config, agentKeys), {
      daemonJsonPath: deps.daemonJsonPath,
      readsAgentFile,
      agentKeys,
      source: command.source,
    }),
  );
  if (problems.length > 0) throw new PreflightError(problems);
  deps.log.debug("boot.preflight", "the host would take the switch: daemon.json and dockerd's flags agree", {
    source: command.source,
    flags: flags.length,
    keys: agentKeys.join(","),
  });
}

/** Whether two paths name the same file (symlinks resolved when they exist). */
async function sameFile(a: string, b: string): Promise<boolean> {
  const real = (p: string) => realpath(p).catch(() => resolve(p));
  return resolve(a) === resolve(b) || (await real(a)) === (await real(b));
}
