/**
 * The agent's configuration: schema (data), pure validation, loading, and the environment and
 * instance-tag overrides. Precedence: defaults < file < environment < instance tags.
 */
export {
  CONFIG_KEYS,
  CONFIG_PATH_ENV,
  CONFIG_SCHEMA,
  DEFAULT_CONFIG_PATH,
  ENV_PREFIX,
  defaultConfig,
  envVarName,
  expectationOf,
  type AgentConfig,
  type ConfigKey,
  type Field,
  type Group,
} from "./schema.ts";
export { checkField, crossCheck, crossProblems, validateConfig, type ValidationResult } from "./validate.ts";
export { loadConfig, parseConfigText, readConfigFile, type LoadOptions, type LoadedConfig } from "./load.ts";
export {
  applyEnvOverrides,
  applyInstanceTags,
  type EffectiveSettings,
  type Env,
  type InstanceTagResult,
  type OverrideResult,
} from "./overrides.ts";
