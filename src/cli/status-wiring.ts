/**
 * The adapters `ebs-cache-agent status` reads through: the state files, the filesystem at the
 * boot's mount point, daemon.json and docker's API. Built here, in the command line's wiring,
 * apart from src/cli/wiring.ts: the health check makes no EC2 call, and this module keeps it
 * from loading the AWS SDK that wiring.ts imports.
 */
import { prewarmStatus } from "../agent/prewarm/run.ts";
import { refreshStatus } from "../agent/refresh/run.ts";
import type { AgentConfig } from "../config/index.ts";
import { createDaemonConfig } from "../docker/daemon-json.ts";
import { createDockerEngine } from "../docker/engine.ts";
import { findInstanceStoreDisks } from "../host/instance-store.ts";
import { chooseLabelMode, engineLabelRecord, isUnderPrefix } from "../docker/labels.ts";
import type { Logger } from "../log.ts";
import type { StatusSources } from "../status/observe.ts";

/** A health check must answer promptly: a docker that does not answer in this long shows no labels. */
const DOCKER_ANSWER_MS = 5000;

/** The real sources of the document on this host. */
export function statusSources(config: AgentConfig, log: Logger): StatusSources {
  const stateDir = config.paths.stateDir;
  return {
    stateDir,
    prewarm: () => prewarmStatus(stateDir),
    filesystem: async (mountPoint) => (await import("../host/facts.ts")).readCacheFilesystem(mountPoint),
    dockerDataRoot: () => createDaemonConfig({ path: config.paths.daemonJson, log }).dataRoot(),
    labels: () => shownLabels(config, log),
    refresh: () => refreshStatus(stateDir),
    instanceStore: () => findInstanceStoreDisks(config.paths.sysfsRoot),
  };
}

/**
 * The agent's labels as docker shows them now (the node's through a manager, else the engine's),
 * or undefined when docker does not answer: a stopped docker is not the cache's problem here,
 * and the data-root check still says where docker would start.
 */
async function shownLabels(config: AgentConfig, log: Logger): Promise<Record<string, string> | undefined> {
  const { prefix, mode } = config.labels;
  if (mode === "off") return undefined;
  const engine = createDockerEngine({ host: config.paths.dockerHost, log, requestTimeoutMs: DOCKER_ANSWER_MS });
  try {
    const info = await engine.info();
    let labels: Record<string, string>;
    if (chooseLabelMode(mode, info) === "node" && info.swarm.nodeId)
      labels = await engine.nodeLabels(info.swarm.nodeId);
    else labels = engineLabelRecord(info.labels);
    return Object.fromEntries(Object.entries(labels).filter(([key]) => isUnderPrefix(prefix, key)));
  } catch (error) {
    log.debug("status.labels-unread", `docker's labels not read: ${(error as Error).message}`);
    return undefined;
  }
}
