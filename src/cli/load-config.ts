/**
 * The first thing every command does: read its configuration. Kept apart from common.ts (which
 * wires the AWS SDK and docker) so that `status` and `prune` load only this.
 */
import { loadConfig, type AgentConfig } from "../config/index.ts";
import { createLogger, type Level, type Logger } from "../log.ts";

/**
 * Loads the config (the file `--config` names, else the default) and makes the logger at its
 * level. The configuration's warnings (an unknown EBS_CACHE_AGENT_* variable, a setting that has
 * no effect, an empty file) are logged here, for every command: a typo'd variable must show.
 */
export async function loadCommandConfig(configPath: string | undefined): Promise<{ config: AgentConfig; log: Logger }> {
  const { config, warnings } = await loadConfig(configPath ? { path: configPath } : {});
  const log = createLogger(undefined, config.logLevel as Level);
  for (const warning of warnings) log.warning("agent.config-warning", warning);
  return { config, log };
}
