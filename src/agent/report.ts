/**
 * Publishing readiness as swarm labels. On a reachable manager the node's own labels are set
 * through the API (`node.labels.<prefix>.state`); elsewhere the agent writes engine labels into
 * daemon.json and reloads dockerd (SIGHUP, no restart), which reach the managers as
 * `engine.labels.<prefix>.state`. See docs/labels.md.
 */
import { describeError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { chooseLabelMode, nodeLabelChanges, readinessLabels, type LabelModeSetting } from "../docker/labels.ts";
import type { ReadinessState } from "./boot.ts";
import type { DaemonConfig, DockerEngine, DockerService } from "./ports.ts";

export interface ReporterDeps {
  prefix: string;
  mode: LabelModeSetting;
  engine: DockerEngine & { nodeLabels(nodeId: string): Promise<Record<string, string>> };
  daemonConfig: DaemonConfig;
  docker: DockerService | undefined;
  log: Logger;
}

/** Builds report(state, details) for the boot. */
export function createReporter(deps: ReporterDeps) {
  return async function report(state: ReadinessState, details: Record<string, string>): Promise<void> {
    if (deps.mode === "off") return;
    const labels = readinessLabels(deps.prefix, state, details);
    const info = await deps.engine.info().catch(() => undefined);
    const mode = info ? chooseLabelMode(deps.mode, info) : deps.mode === "node" ? "node" : "engine";
    if (mode === "node" && info?.swarm.nodeId) {
      const current = await deps.engine.nodeLabels(info.swarm.nodeId);
      const { add, remove } = nodeLabelChanges(deps.prefix, current, labels);
      await deps.engine.setNodeLabels(info.swarm.nodeId, add, remove);
      deps.log.info("labels", `node labels set: ${deps.prefix}.state=${state}`, { node: info.swarm.nodeId });
      return;
    }
    // A worker (or docker not up yet): engine labels, applied by a reload when docker runs.
    await deps.daemonConfig.setEngineLabels(deps.prefix, labels);
    if (deps.docker && (await deps.docker.isActive())) {
      await deps.docker.reload().catch((error: unknown) => {
        deps.log.warning("labels", `docker reload failed; the labels apply at docker's next start: ${describeError(error)}`);
      });
    }
    deps.log.info("labels", `engine labels set: ${deps.prefix}.state=${state}`);
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
          if (remove.length > 0) await deps.engine.setNodeLabels(info.swarm.nodeId, {}, remove);
          deps.log.info("labels", `node labels under ${deps.prefix}. removed`, { node: info.swarm.nodeId, removed: remove.length });
        }
      } catch (error) {
        deps.log.warning("labels", `could not remove the node labels; the next boot replaces them: ${describeError(error)}`);
      }
    }
    await deps.daemonConfig.setEngineLabels(deps.prefix, {});
    deps.log.info("labels", `engine labels under ${deps.prefix}. removed from daemon.json`);
  };
}
