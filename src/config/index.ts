/**
 * The agent's configuration: schema (a JSON Schema), pure validation, loading, and the
 * environment and instance-tag overrides. Precedence: defaults < file < environment < instance tags.
 */
export { CONFIG_KEYS, PREWARM_STRATEGIES, defaultConfig, type AgentConfig, type PrewarmStrategy } from "./schema.ts";
export { validateConfig } from "./validate.ts";
export { loadConfig, parseConfigText, readConfigFile } from "./load.ts";
export { applyEnvOverrides, applyInstanceTags, type EffectiveSettings } from "./overrides.ts";
