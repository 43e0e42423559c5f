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
import type { Logger } from "../log.ts";
import { createLabelReader } from "../docker/readiness-labels.ts";
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
    labels: createLabelReader({
      prefix: config.labels.prefix,
      mode: config.labels.mode,
      engine: createDockerEngine({ host: config.paths.dockerHost, log, requestTimeoutMs: DOCKER_ANSWER_MS }),
    }),
    refresh: () => refreshStatus(stateDir),
    instanceStore: () => findInstanceStoreDisks(config.paths.sysfsRoot),
    log,
  };
}
