/**
 * dockerd's daemon.json, changed only in the keys the agent owns: `data-root`, the engine labels
 * under the agent's prefix and (when docker would otherwise use the containerd image store)
 * `features.containerd-snapshotter`. Every other key keeps its value and its place.
 *
 * Safety rules:
 * - a file that does not parse, or whose top level is not an object, is refused and left
 *   byte-for-byte as it is (dockerd would refuse it too: an operator must look at it);
 * - writes, the backup of the original (`daemon.json.ebs-cache-agent.bak`, or the marker
 *   `daemon.json.ebs-cache-agent.absent` when there was no file), the queue of changes and
 *   `restoreBackup()` follow the protocol of owned-file.ts, shared with containerd's config.toml.
 */
import { isAbsolute } from "node:path";
import { AgentError, describeError } from "../errors.ts";
import type { DaemonConfig } from "../agent/ports.ts";
import type { Logger } from "../log.ts";
import { isUnderPrefix, parseEngineLabel, validateOwnedLabels } from "./labels.ts";
import { engineMajorVersion } from "../engine-version.ts";
import type { ImageStore } from "./engine.ts";
import { BACKUP_SUFFIX, createOwnedFile } from "./owned-file.ts";
import { isBelowMountRoot, recordOriginalDataRoot } from "./original-data-root.ts";

export { ABSENT_SUFFIX, BACKUP_SUFFIX } from "./owned-file.ts";

/** daemon.json as parsed: a JSON object, in the file's key order. */
export type DaemonJson = Record<string, unknown>;

/** daemon.json cannot be read, parsed, or written; the file was not changed. */
export class DaemonJsonError extends AgentError {
  readonly path: string;

  constructor(path: string, message: string, remediation: string, options?: { cause?: unknown }) {
    super(message, remediation, undefined, options);
    this.path = path;
  }
}

/** The daemon.json the agent edits, beyond the agent's DaemonConfig contract. */
export interface DaemonConfigFile extends DaemonConfig {
  readonly path: string;
  readonly backupPath: string;
  readonly absentMarkerPath: string;
  /** The parsed file (`{}` when missing). */
  read(): Promise<DaemonJson>;
  /** The `labels` entries (`key=value`), all of them. */
  engineLabels(): Promise<string[]>;
  /**
   * Makes dockerd keep the graphdriver image store (a pool volume holds images in graphdriver
   * layout): sets `features.containerd-snapshotter` to false when the engine is 29 or newer
   * (containerd store by default) or the key is already there; older engines are left alone.
   * `containerd`: the host asked for it in daemon.json (image-store.ts configuredStore), which
   * is left as it is.
   */
  setImageStore(store: ImageStore, options: { engineVersion?: string }): Promise<void>;
}

export interface DaemonConfigOptions {
  /** Usually /etc/docker/daemon.json. */
  path: string;
  log?: Logger;
  /**
   * Where to record the host's own data-root before the first switch to a cache volume (below
   * `mountRoot`), so that the release and a degraded boot put exactly it back
   * (original-data-root.ts); `fallback`: what they put back without a record (absent: docker's
   * default), so that a state folder refusing the record costs nothing while daemon.json says
   * just that. Absent: nothing is recorded.
   */
  original?: { stateDir: string; mountRoot: string; fallback?: string };
}

/** Parses daemon.json text; blank text is `{}` (dockerd accepts an empty file too). */
export function parseDaemonJson(text: string, path: string): DaemonJson {
  if (text.trim() === "") return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (cause) {
    throw new DaemonJsonError(
      path,
      `${path} is not valid JSON (${describeError(cause)}); the agent left it unchanged`,
      `fix the file by hand (python3 -m json.tool ${path}) or restore it from ${path}${BACKUP_SUFFIX}, then run again`,
      { cause },
    );
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new DaemonJsonError(
      path,
      `${path} holds ${Array.isArray(parsed) ? "an array" : typeof parsed} at its top level, not an object; the ` +
        `agent left it unchanged`,
      `make ${path} a JSON object ({} at least), then run again`,
    );
  }
  return parsed as DaemonJson;
}

/** Renders like the original file: its indentation (or one line when it was one line), a final newline. */
export function renderDaemonJson(config: DaemonJson, original?: string): string {
  if (original !== undefined && original.trim() !== "" && !original.trim().includes("\n")) {
    return JSON.stringify(config) + (original.endsWith("\n") ? "\n" : "");
  }
  const indent = original === undefined ? undefined : /^\{[ \t]*\r?\n([ \t]+)\S/.exec(original)?.[1];
  return JSON.stringify(config, null, indent ?? 2) + "\n";
}

/** The configured data-root (`data-root`, or the pre-23 alias `graph`); undefined = docker's default. */
export function dataRootOf(config: DaemonJson, path: string): string | undefined {
  for (const key of ["data-root", "graph"]) {
    const value = config[key];
    if (value === undefined) continue;
    if (typeof value !== "string") {
      throw new DaemonJsonError(path, `${path}: "${key}" is not a string`, `fix "${key}" in ${path} by hand`);
    }
    return value;
  }
  return undefined;
}

/** A copy with `data-root` set in place (appended when new), or removed when undefined. */
export function withDataRoot(config: DaemonJson, dataRoot: string | undefined, path: string): DaemonJson {
  if (config.graph !== undefined) {
    throw new DaemonJsonError(
      path,
      `${path} sets the deprecated "graph" key; the agent will not guess which of graph and data-root docker ` +
        `should use`,
      `rename "graph" to "data-root" in ${path}, then run again`,
    );
  }
  // eslint-disable-next-line no-control-regex
  if (dataRoot !== undefined && (!isAbsolute(dataRoot) || /[\u0000-\u001f]/.test(dataRoot))) {
    throw new DaemonJsonError(
      path,
      `refusing data-root ${JSON.stringify(dataRoot)}: not an absolute path`,
      "report this bug",
    );
  }
  return withKey(config, "data-root", dataRoot);
}

/** The `labels` array, checked to be strings. */
export function labelsOf(config: DaemonJson, path: string): string[] {
  const labels = config.labels;
  if (labels === undefined) return [];
  if (!Array.isArray(labels) || labels.some((entry) => typeof entry !== "string")) {
    throw new DaemonJsonError(
      path,
      `${path}: "labels" is not an array of "key=value" strings`,
      `fix "labels" in ${path} by hand`,
    );
  }
  return labels as string[];
}

/** A copy whose labels under `<prefix>.` are exactly `labels`; every other entry is kept in its place. */
export function withEngineLabels(
  config: DaemonJson,
  prefix: string,
  labels: Record<string, string>,
  path: string,
): DaemonJson {
  validateOwnedLabels(prefix, labels);
  const kept = labelsOf(config, path).filter((entry) => !isUnderPrefix(prefix, parseEngineLabel(entry).key));
  const next = [...kept, ...Object.entries(labels).map(([key, value]) => `${key}=${value}`)];
  if (next.length === 0 && config.labels === undefined) return { ...config };
  return withKey(config, "labels", next);
}

/** A copy that keeps dockerd on the graphdriver store (see DaemonConfigFile.setImageStore). */
export function withGraphdriverStore(config: DaemonJson, engineVersion: string | undefined, path: string): DaemonJson {
  const features = config.features;
  if (features !== undefined && (typeof features !== "object" || features === null || Array.isArray(features))) {
    throw new DaemonJsonError(path, `${path}: "features" is not an object`, `fix "features" in ${path} by hand`);
  }
  const current = (features as Record<string, unknown> | undefined)?.["containerd-snapshotter"];
  const major = engineMajorVersion(engineVersion);
  if (current === false || (current === undefined && !(major !== undefined && major >= 29))) return { ...config };
  return withKey(config, "features", withKey((features ?? {}) as DaemonJson, "containerd-snapshotter", false));
}

function withKey(config: DaemonJson, key: string, value: unknown): DaemonJson {
  const next: DaemonJson = {};
  for (const [k, v] of Object.entries(config)) if (k !== key || value !== undefined) next[k] = k === key ? value : v;
  if (value !== undefined && !Object.hasOwn(config, key)) next[key] = value;
  return next;
}

/** The daemon.json at `path`, for the agent. */
export function createDaemonConfig(options: DaemonConfigOptions): DaemonConfigFile {
  const { path, log } = options;
  const file = createOwnedFile({
    path,
    errorClass: DaemonJsonError,
  });

  async function load(): Promise<DaemonJson> {
    const current = await file.read();
    return current.bytes === undefined ? {} : parseDaemonJson(current.bytes.toString("utf8"), path);
  }

  async function change(
    what: string,
    edit: (config: DaemonJson) => DaemonJson,
    before?: (config: DaemonJson) => Promise<unknown>,
  ): Promise<void> {
    const { written, backup } = await file.change(async (current) => {
      const text = current.bytes?.toString("utf8");
      const config = text === undefined ? {} : parseDaemonJson(text, path);
      const next = edit(config);
      if (JSON.stringify(next) === JSON.stringify(config)) return undefined;
      await before?.(config);
      return renderDaemonJson(next, text);
    });
    if (backup) log?.info("docker.daemon-json-backup", "kept a backup of daemon.json", { path, backup });
    if (written) log?.info("docker.daemon-json-written", `${what} in daemon.json`, { path });
    else log?.debug("docker.daemon-json-unchanged", `${what}: daemon.json already says so`, { path });
  }

  return {
    path,
    backupPath: file.backupPath,
    absentMarkerPath: file.absentMarkerPath,
    read: load,
    dataRoot: () => load().then((config) => dataRootOf(config, path)),
    engineLabels: () => load().then((config) => labelsOf(config, path)),
    setDataRoot: (dataRoot) =>
      change(
        dataRoot === undefined ? "removed data-root" : `set data-root to ${dataRoot}`,
        (config) => withDataRoot(config, dataRoot, path),
        // Recorded from the file as it is before the switch, inside the same serial change.
        options.original && isBelowMountRoot(options.original.mountRoot, dataRoot)
          ? (config) =>
              recordOriginalDataRoot(options.original!.stateDir, dataRootOf(config, path), {
                mountRoot: options.original!.mountRoot,
                fallback: options.original!.fallback,
                log,
              })
          : undefined,
      ),
    setEngineLabels: (prefix, labels) =>
      change(`set the engine labels under ${prefix}.`, (config) => withEngineLabels(config, prefix, labels, path)),
    setImageStore: (store, { engineVersion }) =>
      store === "containerd"
        ? Promise.resolve()
        : change("kept the graphdriver image store", (config) => withGraphdriverStore(config, engineVersion, path)),
    restoreBackup: async () => {
      if ((await file.restore()) === "restored") {
        log?.notice("docker.daemon-json-restored", "restored daemon.json from its backup", {
          path,
          backup: file.backupPath,
        });
      } else {
        log?.notice("docker.daemon-json-restored", "removed daemon.json: there was none before the agent's change", {
          path,
        });
      }
    },
  };
}
