/**
 * The containerd image store on the cache volume. With `features.containerd-snapshotter=true`,
 * dockerd keeps no images under its data-root: the content store (`io.containerd.content.v1.content`),
 * the snapshots (`io.containerd.snapshotter.v1.overlayfs`) and the metadata that names them
 * (`io.containerd.metadata.v1.bolt/meta.db`, namespace `moby`) are under containerd's `root`.
 * Debian's docker.service passes `--containerd=/run/containerd/containerd.sock`, and a dockerd
 * without that flag still uses the system containerd when its socket exists (checked on docker
 * 28.5.2 with containerd 2.1.9, docs/operations.md "Engines tested"): the root is
 * /var/lib/containerd, on the machine's root disk. A volume holding only the data-root therefore
 * holds no images for this store; its images are visible only when containerd's root is the
 * volume's `containerd/` folder, beside `docker/`.
 *
 * This module edits the top-level `root` of /etc/containerd/config.toml (every other line kept
 * byte for byte, `state` left on /run: it is runtime state) under the backup protocol of
 * owned-file.ts (the one daemon.json follows: original kept, one queue, durable removal), and
 * says which containerd state must not travel between machines. containerd reads its config
 * only at start: the caller restarts containerd.service when `setRoot` changed the file, before
 * docker starts.
 */
import { mkdir } from "node:fs/promises";
import { isAbsolute, join } from "node:path";
import { AgentError } from "../errors.ts";
import { entryKind, removeBeneath } from "../host/volume-paths.ts";
import type { Logger } from "../log.ts";
import { createOwnedFile, ioError as ownedFileIoError } from "./owned-file.ts";

/** containerd's root when config.toml sets none. */
export const DEFAULT_CONTAINERD_ROOT = "/var/lib/containerd";
/** Usually where containerd reads its config. */
export const DEFAULT_CONTAINERD_CONFIG = "/etc/containerd/config.toml";

/**
 * Folders of containerd's root that belong to the machine that ran it, not to the images:
 * the instance's uuid (introspection: two hosts must not report the same one), the tasks and
 * shims of its containers, and its temporary mounts. Removed from a pool volume before
 * containerd starts on it, as MACHINE_LOCAL_STATE is from the data-root.
 */
export const CONTAINERD_MACHINE_LOCAL_STATE = [
  "io.containerd.grpc.v1.introspection",
  "io.containerd.runtime.v2.task",
  "io.containerd.sandbox.controller.v1.shim",
  "tmpmounts",
] as const;

/** config.toml cannot be read, understood or written; it was not changed. */
export class ContainerdConfigError extends AgentError {
  readonly path: string;

  constructor(path: string, message: string, remediation: string, options?: { cause?: unknown }) {
    super(message, remediation, undefined, options);
    this.path = path;
  }
}

/**
 * containerd's root on a mounted volume, made ready for containerd: the folder created (0711,
 * as containerd makes it) and, with `dropMachineState` (a pool volume's first boot of this
 * activation), CONTAINERD_MACHINE_LOCAL_STATE removed. Refuses a root that is not a folder (a
 * symlink would lead the removal off the volume).
 */
export async function prepareContainerdRoot(
  root: string,
  options: { dropMachineState: boolean; log?: Logger },
): Promise<void> {
  if (!isAbsolute(root))
    throw new ContainerdConfigError(
      root,
      `containerd's root must be an absolute path, not ${JSON.stringify(root)}`,
      "report this: the agent computed it from the volume's mount point",
    );
  const kind = await entryKind(root).catch((error: unknown) => {
    throw ioError(root, "stat", error);
  });
  if (kind !== "missing" && kind !== "folder") {
    throw new ContainerdConfigError(
      root,
      `${root} is not a folder (a ${kind})`,
      `move ${root} away: it is where containerd's root goes on the cache volume`,
    );
  }
  if (kind === "missing") {
    await mkdir(root, { recursive: true, mode: 0o711 }).catch((error: unknown) => {
      throw ioError(root, "create", error);
    });
    options.log?.info("docker.containerd-root-created", "containerd's root created on the volume", { root });
    return;
  }
  if (!options.dropMachineState) return;
  const removed: string[] = [];
  for (const name of CONTAINERD_MACHINE_LOCAL_STATE) {
    // A link there is unlinked, its target untouched.
    const gone = await removeBeneath(root, name).catch((error: unknown) => {
      throw ioError(join(root, name), "remove", error);
    });
    if (gone) removed.push(name);
  }
  options.log?.info("docker.containerd-root-prepared", "containerd's machine-local state removed from the volume", {
    root,
    removed: removed.join(",") || "(none)",
  });
}

/** The lines of the top-level table: before the first `[table]` or `[[array]]` header. */
function topLevelEnd(lines: readonly string[]): number {
  const header = lines.findIndex((line) => /^\s*\[/.test(line));
  return header === -1 ? lines.length : header;
}

const ROOT_LINE = /^(\s*)(root|"root"|'root')\s*=\s*(.*)$/;

/** The value of a one-line TOML string (basic or literal), or undefined when it is something else. */
function tomlString(raw: string): string | undefined {
  const value = raw.replace(/\s+#.*$/, "").trim();
  const literal = /^'([^']*)'$/.exec(value);
  if (literal) return literal[1];
  const basic = /^"((?:[^"\\]|\\.)*)"$/.exec(value);
  if (!basic) return undefined;
  try {
    return JSON.parse(`"${basic[1]}"`) as string;
  } catch {
    return undefined;
  }
}

/** containerd's root as config.toml sets it (top-level `root`), or the default. */
export function containerdRootOf(text: string, path: string): string {
  const lines = text.split("\n");
  const end = topLevelEnd(lines);
  for (let i = 0; i < end; i++) {
    const m = ROOT_LINE.exec(lines[i]!);
    if (!m) continue;
    const value = tomlString(m[3]!);
    if (value === undefined) {
      throw new ContainerdConfigError(
        path,
        `${path}: line ${i + 1}, the top-level root is not a one-line string`,
        `write root = "/var/lib/containerd" (or remove the line) in ${path}`,
      );
    }
    return value;
  }
  return DEFAULT_CONTAINERD_ROOT;
}

/**
 * config.toml's text with the top-level `root` set to `root` (undefined: the line removed, so
 * containerd uses its default); every other line is kept as it is.
 */
export function withContainerdRoot(text: string, root: string | undefined, path: string): string {
  if (root !== undefined && !isAbsolute(root)) {
    throw new ContainerdConfigError(
      path,
      `containerd's root must be an absolute path, not ${JSON.stringify(root)}`,
      "report this: the agent computed it from the volume's mount point",
    );
  }
  containerdRootOf(text, path); // refuses a root line this module would not understand
  const lines = text.split("\n");
  const end = topLevelEnd(lines);
  const line = root === undefined ? undefined : `root = ${JSON.stringify(root)}`;
  const at = lines.slice(0, end).findIndex((l) => ROOT_LINE.test(l));
  if (at !== -1) {
    if (line === undefined) lines.splice(at, 1);
    else lines[at] = line;
    return lines.join("\n");
  }
  if (line === undefined) return text;
  // After `version = …` when there is one (containerd reads the version first), else first.
  const version = lines.slice(0, end).findIndex((l) => /^\s*version\s*=/.test(l));
  lines.splice(version === -1 ? 0 : version + 1, 0, line);
  return lines.join("\n");
}

/** /etc/containerd/config.toml, changed only in its top-level `root`. */
export interface ContainerdConfigFile {
  readonly path: string;
  readonly backupPath: string;
  readonly absentMarkerPath: string;
  /** The root containerd uses (config.toml's, or the default). */
  root(): Promise<string>;
  /**
   * Sets the top-level root (undefined: removes it). Returns whether the file changed: only then
   * must containerd restart. The first change of a run keeps a backup of the file as it was.
   */
  setRoot(root: string | undefined): Promise<boolean>;
  /** Puts the file back as the first change of this run found it. */
  restoreBackup(): Promise<void>;
}

export function createContainerdConfig(options: { path?: string; log?: Logger } = {}): ContainerdConfigFile {
  const path = options.path ?? DEFAULT_CONTAINERD_CONFIG;
  const { log } = options;
  const file = createOwnedFile({
    path,
    errorClass: ContainerdConfigError,
  });
  const textOf = async () => (await file.read()).bytes?.toString("utf8") ?? "";

  return {
    path,
    backupPath: file.backupPath,
    absentMarkerPath: file.absentMarkerPath,
    root: async () => containerdRootOf(await textOf(), path),
    async setRoot(root) {
      const { written, backup } = await file.change((current) => {
        const text = current.bytes?.toString("utf8") ?? "";
        const next = withContainerdRoot(text, root, path);
        return next === text ? undefined : next;
      });
      const fields = { path, root: root ?? DEFAULT_CONTAINERD_ROOT };
      if (backup) log?.info("docker.containerd-config-backup", "kept a backup of config.toml", { path, backup });
      if (written) log?.info("docker.containerd-config-written", "set containerd's root", fields);
      else log?.debug("docker.containerd-config-unchanged", "containerd's root is already set", fields);
      return written;
    },
    restoreBackup: async () => {
      if ((await file.restore()) === "restored") {
        log?.notice("docker.containerd-config-restored", "restored config.toml from its backup", {
          path,
          backup: file.backupPath,
        });
      } else {
        log?.notice(
          "docker.containerd-config-restored",
          "removed config.toml: there was none before the agent's change",
          {
            path,
          },
        );
      }
    },
  };
}

function ioError(path: string, action: string, cause: unknown): ContainerdConfigError {
  return ownedFileIoError(ContainerdConfigError, path, action, cause);
}
