/**
 * `ebs-cache-agent status`: the whole state of this host (src/status/): the last boot and
 * release as recorded, the pre-warm's state, and what is true now (the filesystem at the boot's
 * mount point, daemon.json's data-root, the labels docker shows). `--json` prints the document
 * of schema/status.schema.json. The exit code is a health check (statusExitCode). It reads only:
 * no EC2 call, no write.
 */
import { Command } from "commander";
import { prewarmStatus } from "../agent/prewarm/run.ts";
import { refreshStatus } from "../agent/refresh/run.ts";
import type { AgentConfig } from "../config/index.ts";
import { createDaemonConfig } from "../docker/daemon-json.ts";
import { createDockerEngine } from "../docker/engine.ts";
import { chooseLabelMode, engineLabelRecord, isUnderPrefix } from "../docker/labels.ts";
import type { Logger } from "../log.ts";
import { buildStatus } from "../status/document.ts";
import { observeStatus, type StatusSources } from "../status/observe.ts";
import { renderStatus, statusExitCode } from "../status/view.ts";
import { loadCommandConfig } from "./load-config.ts";
import { CONFIG_OPTION } from "./options.ts";

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

/** Builds `ebs-cache-agent status`. */
export function statusCommand(): Command {
  return new Command("status")
    .description(
      "the state of this host: last boot (outcome, source, timeline), volume, mount and fill, docker's " +
        "data-root, labels, pre-warm, refresh, last release",
    )
    .option(...CONFIG_OPTION)
    .option("--json", "print the document of schema/status.schema.json")
    .addHelpText(
      "after",
      "\nA health check: it reads the agent's records and the host, and changes nothing.\n" +
        ("Exit codes: 0 healthy (warnings may be listed), 1 a problem (no boot recorded, the volume not mounted, " +
          "docker's data-root\n") +
        ("not the volume's, the cache filesystem 95 % full, a release since the boot), 2 usage, 3 invalid " +
          "configuration, 4 the boot degraded."),
    )
    .action(async (opts: { config?: string; json?: boolean }) => {
      const { config, log } = await loadCommandConfig(opts.config);
      const doc = buildStatus(await observeStatus(statusSources(config, log)));
      const out = (line: string) => process.stdout.write(line + "\n");
      if (opts.json) out(JSON.stringify(doc, null, 2));
      else {
        for (const line of renderStatus(doc)) out(line);
        // The pre-warm in full: its samples, and the progress (percent, MiB/s, ETA) of an initialization.
        if (doc.prewarm) {
          out("pre-warm details:");
          for (const line of (await prewarmStatus(config.paths.stateDir)).lines) out(`  ${line}`);
        }
      }
      process.exitCode = statusExitCode(doc);
    });
}
