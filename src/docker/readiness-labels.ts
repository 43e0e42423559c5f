/**
 * Publishing readiness as swarm labels. On a reachable manager the node's own labels are set
 * through the API (`node.labels.<prefix>.state`); elsewhere the agent writes engine labels into
 * daemon.json and reloads dockerd (SIGHUP, no restart), which reach the managers as
 * `engine.labels.<prefix>.state`. See docs/labels.md.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { AgentError, describeError } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { HostProblem } from "./dockerd-flags.ts";
import {
  assertOwnedUpdate,
  chooseLabelMode,
  engineLabelRecord,
  isUnderPrefix,
  nodeLabelChanges,
  readinessLabels,
  type LabelModeSetting,
} from "./labels.ts";
import { Label, labelKey, type ReadinessState } from "../tags.ts";
import type { DaemonConfig, DockerEngine, DockerService } from "../agent/ports.ts";

export interface ReporterDeps {
  prefix: string;
  mode: LabelModeSetting;
  engine: DockerEngine & { nodeLabels(nodeId: string): Promise<Record<string, string>> };
  daemonConfig: DaemonConfig;
  docker: DockerService | undefined;
  log: Logger;
  /**
   * Why engine labels must not be written on this host (a `--label` flag: dockerd refuses it
   * next to daemon.json's `labels`, at the reload and at its next start), or undefined.
   */
  engineLabelsProblem?: () => Promise<HostProblem | undefined>;
  /** How long published labels may take to show in `docker info` / the node (default 15 s). */
  readBackTimeoutMs?: number;
  /**
   * Told the labels each report published (read back, or written for docker's start); never
   * for a report that failed or with mode `off`. The boot's record keeps the last.
   */
  onPublished?: (labels: Record<string, string>) => void;
}

/** Labels were published but do not show where the scheduler reads them, or could not be published. */
export class LabelsNotTakenError extends AgentError {
  constructor(message: string, remediation: string, options?: { cause?: unknown }) {
    super(message, remediation, undefined, options);
  }
}

const DEFAULT_READ_BACK_MS = 15_000;

/**
 * Builds report(state, details): publishes, then reads back. Throws LabelsNotTakenError when
 * they do not show within the deadline (or cannot be published on this host): the caller must
 * then not call the node ready. Engine labels written while docker is not running apply at its
 * start and cannot be read back yet; that is logged.
 */
export function createReporter(deps: ReporterDeps) {
  return async function report(state: ReadinessState, details: Record<string, string>): Promise<void> {
    if (deps.mode === "off") return;
    const labels = readinessLabels(deps.prefix, state, details);
    const info = await deps.engine.info().catch(() => undefined);
    const mode = info ? chooseLabelMode(deps.mode, info) : deps.mode === "node" ? "node" : "engine";
    const deadline = Date.now() + (deps.readBackTimeoutMs ?? DEFAULT_READ_BACK_MS);
    if (mode === "node" && info?.swarm.nodeId) {
      const nodeId = info.swarm.nodeId;
      const current = await deps.engine.nodeLabels(nodeId);
      const { add, remove } = nodeLabelChanges(deps.prefix, current, labels);
      assertOwnedUpdate(deps.prefix, add, remove);
      await deps.engine.setNodeLabels(nodeId, add, remove);
      await readBack(deps, "node", labels, deadline, async () => deps.engine.nodeLabels(nodeId));
      deps.log.info("labels.publish", `node labels set and read back: ${labelKey(deps.prefix, Label.state)}=${state}`, {
        node: nodeId,
      });
      deps.onPublished?.(labels);
      return;
    }
    // A worker (or docker not up yet): engine labels, applied by a reload when docker runs.
    const refused = await deps.engineLabelsProblem?.();
    if (refused) {
      throw new LabelsNotTakenError(`engine labels not written: ${refused.problem}`, refused.remediation);
    }
    await deps.daemonConfig.setEngineLabels(deps.prefix, labels);
    if (!deps.docker || !(await deps.docker.isActive())) {
      deps.log.info(
        "labels.publish",
        `engine labels written: ${labelKey(deps.prefix, Label.state)}=${state}; docker is not running here, they ` +
          `apply at its start (not read back)`,
      );
      deps.onPublished?.(labels);
      return;
    }
    try {
      await deps.docker.reload();
    } catch (error) {
      throw new LabelsNotTakenError(
        `docker did not reload daemon.json for the engine labels: ${describeError(error)}`,
        "see why dockerd refused the file: journalctl -u docker -n 50",
        { cause: error },
      );
    }
    await readBack(deps, "engine", labels, deadline, async () => engineLabelRecord((await deps.engine.info()).labels));
    deps.log.info("labels.publish", `engine labels set and read back: ${labelKey(deps.prefix, Label.state)}=${state}`);
    deps.onPublished?.(labels);
  };
}

/**
 * Polls until the labels under the prefix are exactly `wanted` (a reload is applied
 * asynchronously on a real host), backing off from 100 ms to 1 s; throws at the deadline.
 */
async function readBack(
  deps: ReporterDeps,
  mode: "node" | "engine",
  wanted: Record<string, string>,
  deadline: number,
  read: () => Promise<Record<string, string>>,
): Promise<void> {
  let wait = 100;
  let differences: string[];
  for (;;) {
    try {
      differences = labelDifferences(deps.prefix, await read(), wanted);
      if (differences.length === 0) return;
    } catch (error) {
      differences = [`could not read them: ${describeError(error)}`];
    }
    if (Date.now() >= deadline) break;
    await sleep(Math.min(wait, Math.max(0, deadline - Date.now())));
    wait = Math.min(wait * 2, 1000);
  }
  const where = mode === "node" ? "the node's labels (docker node inspect)" : "docker info's Labels";
  throw new LabelsNotTakenError(
    `${where} still differ from what was published after ${deps.readBackTimeoutMs ?? DEFAULT_READ_BACK_MS} ms: ` +
      `${differences.slice(0, 4).join("; ")}`,
    mode === "node"
      ? "check that this node can update itself through a manager (docker node inspect self), or use labels.mode engine"
      : "check that dockerd reads the agent's daemon.json (its --config-file) and that no --label flag is set: " +
          "journalctl -u docker -n 50",
  );
}

/** What differs under the prefix between what docker shows and what was published. */
export function labelDifferences(
  prefix: string,
  shown: Record<string, string>,
  wanted: Record<string, string>,
): string[] {
  const out: string[] = [];
  for (const [key, value] of Object.entries(wanted)) {
    if (!Object.hasOwn(shown, key)) out.push(`${key} missing`);
    else if (shown[key] !== value) out.push(`${key}=${shown[key]} (published ${value})`);
  }
  for (const key of Object.keys(shown))
    if (isUnderPrefix(prefix, key) && !Object.hasOwn(wanted, key)) out.push(`${key} still there`);
  return out;
}

/**
 * Builds shown(): the agent's labels as docker shows them now, where the reporter publishes them
 * (the node's through a manager, else the engine's), only those under the prefix; undefined with
 * mode `off`. Throws when docker does not answer.
 */
export function createLabelReader(deps: Pick<ReporterDeps, "prefix" | "mode" | "engine">) {
  return async function shown(): Promise<Record<string, string> | undefined> {
    if (deps.mode === "off") return undefined;
    const info = await deps.engine.info();
    const labels =
      chooseLabelMode(deps.mode, info) === "node" && info.swarm.nodeId
        ? await deps.engine.nodeLabels(info.swarm.nodeId)
        : engineLabelRecord(info.labels);
    return Object.fromEntries(Object.entries(labels).filter(([key]) => isUnderPrefix(deps.prefix, key)));
  };
}

/**
 * Builds withdraw() for the release: the agent's labels go, since the volume they describe
 * does. Node labels (through a manager's API) only while docker still answers and `node`
 * is asked, best effort: a node that cannot reach a manager keeps them until its next boot,
 * and a stopped node is `down` in the swarm anyway. Engine labels are removed from daemon.json,
 * so a docker started later (by hand, or at the next boot before the agent reports again)
 * does not advertise `ready` for a volume it no longer has.
 */
export function createLabelWithdrawer(deps: ReporterDeps) {
  return async function withdraw(options: { node: boolean }): Promise<void> {
    if (deps.mode === "off") return;
    if (options.node) {
      try {
        const info = await deps.engine.info();
        if (chooseLabelMode(deps.mode, info) === "node" && info.swarm.nodeId) {
          const current = await deps.engine.nodeLabels(info.swarm.nodeId);
          const { remove } = nodeLabelChanges(deps.prefix, current, {});
          assertOwnedUpdate(deps.prefix, {}, remove);
          if (remove.length > 0) await deps.engine.setNodeLabels(info.swarm.nodeId, {}, remove);
          deps.log.info("labels.remove", `node labels under ${deps.prefix}. removed`, {
            node: info.swarm.nodeId,
            removed: remove.length,
          });
        }
      } catch (error) {
        deps.log.warning(
          "labels.remove",
          `could not remove the node labels; the next boot replaces them: ${describeError(error)}`,
        );
      }
    }
    await deps.daemonConfig.setEngineLabels(deps.prefix, {});
    deps.log.info("labels.remove", `engine labels under ${deps.prefix}. removed from daemon.json`);
  };
}
