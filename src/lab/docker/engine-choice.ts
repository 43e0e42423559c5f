/**
 * Which docker engine and image store a lab host runs (`npm run lab -- --engine 28 --store
 * containerd`, bench/boot.ts `--engines 20,28 --stores graphdriver,containerd`): the host's own
 * dockerd when it is the engine asked for with the graphdriver store (the lab's fast path), an
 * engine machine (nspawn.ts) otherwise. Pure: the caller reads the host's `dockerd --version`.
 */
import type { ImageStore } from "../../docker/engine.ts";
import { AgentError, ExitCode } from "../../errors.ts";
import { ENGINES, type EngineName } from "../machines/nspawn-rootfs.ts";

export const IMAGE_STORES: readonly ImageStore[] = ["graphdriver", "containerd"];

/** A combination of engine and store the lab cannot run; nothing was started. */
export class EngineChoiceError extends AgentError {
  constructor(message: string, remediation: string) {
    super(message, remediation, ExitCode.usage);
  }
}

/** `--engine`'s value: 20 (or 20.10), 26 or 28. */
export function parseEngine(value: string): EngineName {
  const name = value.trim() === "20" ? "20.10" : value.trim();
  if (!Object.hasOwn(ENGINES, name)) {
    throw new EngineChoiceError(
      `no engine ${JSON.stringify(value)}: the lab has docker 20 (bookworm), 26 (trixie) and 28 (sid)`,
      "use --engine 20, 26 or 28",
    );
  }
  return name as EngineName;
}

/** `--store`'s value. */
export function parseStore(value: string): ImageStore {
  const store = value.trim();
  if (!(IMAGE_STORES as readonly string[]).includes(store)) {
    throw new EngineChoiceError(
      `no image store ${JSON.stringify(value)}`,
      "use --store graphdriver or --store containerd",
    );
  }
  return store as ImageStore;
}

/** The lab engine a docker version belongs to (`20.10.24+dfsg1` → 20.10), if it is one of them. */
export function engineOfVersion(version: string | undefined): EngineName | undefined {
  const m = /^(\d+)\.(\d+)/.exec(version ?? "");
  if (!m) return undefined;
  const name = m[1] === "20" ? `20.${m[2]}` : m[1]!;
  return Object.hasOwn(ENGINES, name) ? (name as EngineName) : undefined;
}

/** Where a lab host's docker runs. */
export type HostEngine = { kind: "host" } | { kind: "machine"; engine: EngineName; store: ImageStore };

/**
 * The host for `engine` and `store` (either may be unset: the host's engine, the graphdriver
 * store). The containerd image store needs docker 24 or later (`features.containerd-snapshotter`):
 * asked on 20.10 it is an error, not a silent graphdriver run.
 */
export function chooseHostEngine(
  asked: { engine?: EngineName; store?: ImageStore },
  hostVersion: string | undefined,
): HostEngine {
  const hostEngine = engineOfVersion(hostVersion);
  const engine = asked.engine ?? hostEngine;
  const store = asked.store ?? "graphdriver";
  if (engine === undefined) {
    throw new EngineChoiceError(
      `this machine's dockerd (${hostVersion ?? "not found"}) is none of the lab's engines, and no --engine was given`,
      "name one: --engine 20, 26 or 28",
    );
  }
  if (store === "containerd" && engine === "20.10") {
    throw new EngineChoiceError(
      "docker 20.10 has no containerd image store (features.containerd-snapshotter came with docker 24)",
      "use --engine 26 or 28 with --store containerd, or --store graphdriver on docker 20",
    );
  }
  if (engine === hostEngine && store === "graphdriver") return { kind: "host" };
  return { kind: "machine", engine, store };
}
