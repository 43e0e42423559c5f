/**
 * Loading: `readConfigFile` only reads, `parseConfigText` and `validateConfig` are pure, and
 * `loadConfig` composes them with the environment overrides and throws one ConfigError listing
 * every problem.
 */
import { readFile } from "node:fs/promises";
import { ConfigError } from "../errors.ts";
import { applyEnvOverrides, type Env } from "./overrides.ts";
import { CONFIG_PATH_ENV, DEFAULT_CONFIG_PATH, type AgentConfig } from "./schema.ts";
import { crossCheck, crossProblems, validateConfig } from "./validate.ts";

/** The file's text, or undefined when it does not exist (all defaults then). */
export async function readConfigFile(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new ConfigError(
      [`${path}: cannot be read (${(error as Error).message})`],
      `make ${path} a readable file, or remove it to run with the defaults`,
    );
  }
}

export type ParsedConfig = { ok: true; raw: unknown; warnings: string[] } | { ok: false; problem: string };

/** Parses the file's text; an empty file means "all defaults" (with a warning). */
export function parseConfigText(text: string, path: string): ParsedConfig {
  const body = text.replace(/^\uFEFF/, "");
  if (body.trim() === "")
    return { ok: true, raw: undefined, warnings: [`${path} is empty; using the defaults (write {} to silence this)`] };
  try {
    return { ok: true, raw: JSON.parse(body), warnings: [] };
  } catch (error) {
    const found = locateJsonError(body);
    if (!found) return { ok: false, problem: `${path} is not valid JSON: ${(error as Error).message}` };
    const before = body.slice(0, found.offset).split("\n");
    const line = before.length;
    const column = before[before.length - 1]!.length + 1;
    return { ok: false, problem: `${path} is not valid JSON: line ${line}, column ${column}: ${found.reason}` };
  }
}

class JsonStop extends Error {
  readonly offset: number;
  readonly reason: string;

  constructor(offset: number, reason: string) {
    super(reason);
    this.offset = offset;
    this.reason = reason;
  }
}

/**
 * Where and why text stops being JSON. JSON.parse's own message differs between Node versions
 * and sometimes has no position, so the position comes from this small scanner instead.
 */
function locateJsonError(text: string): { offset: number; reason: string } | undefined {
  let i = 0;
  const stop = (reason: string): never => {
    throw new JsonStop(i, reason);
  };
  const here = () => (i >= text.length ? "the end of the file" : JSON.stringify(text[i]));
  const space = () => {
    while (i < text.length && " \t\n\r".includes(text[i]!)) i++;
  };
  const string = () => {
    i++;
    for (;;) {
      const c = text[i];
      if (c === undefined) stop("unterminated string");
      if (c === '"') return void i++;
      if (c === "\\") {
        const next = text[i + 1];
        if (next === "u" && /^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) i += 6;
        else if (next !== undefined && '"\\/bfnrt'.includes(next)) i += 2;
        else stop("invalid escape in a string");
      } else if (c!.charCodeAt(0) < 0x20) stop("control character (such as a newline) inside a string");
      else i++;
    }
  };
  const container = (close: "}" | "]") => {
    i++;
    space();
    if (text[i] === close) return void i++;
    for (;;) {
      space();
      if (close === "}") {
        if (text[i] !== '"') stop(`expected a double-quoted property name, found ${here()}`);
        string();
        space();
        if (text[i] !== ":") stop(`expected ":" after the property name, found ${here()}`);
        i++;
      }
      value();
      space();
      if (text[i] === close) return void i++;
      if (text[i] !== ",") stop(`expected "," or "${close}", found ${here()}`);
      i++;
      space();
      if (text[i] === close) stop(`trailing comma before "${close}"`);
    }
  };
  const value = () => {
    space();
    const c = text[i];
    if (c === "{") return container("}");
    if (c === "[") return container("]");
    if (c === '"') return string();
    const number = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
    number.lastIndex = i;
    if (c !== undefined && /[-0-9]/.test(c)) {
      if (!number.test(text)) stop("invalid number");
      i = number.lastIndex;
      return;
    }
    for (const word of ["true", "false", "null"]) {
      if (text.startsWith(word, i)) return void (i += word.length);
    }
    const word = /[A-Za-z_$][\w$]*/y;
    word.lastIndex = i;
    if (word.test(text))
      stop(
        `unexpected word ${JSON.stringify(text.slice(i, word.lastIndex))} (strings need double quotes; the ` +
          `literals are true, false and null)`,
      );
    stop(`expected a value, found ${here()}`);
  };
  try {
    value();
    space();
    if (i < text.length) stop(`unexpected ${here()} after the end of the JSON value`);
    return undefined;
  } catch (error) {
    if (error instanceof JsonStop) return { offset: error.offset, reason: error.reason };
    throw error;
  }
}

export interface LoadOptions {
  /**
   * The file (`--config`); default: $EBS_CACHE_AGENT_CONFIG, else /etc/ebs-cache-agent/config.json.
   * A file named here or by the variable must exist; only the default may be absent.
   */
  path?: string;
  /** Default: process.env. */
  env?: Env;
}

export interface LoadedConfig {
  config: AgentConfig;
  warnings: string[];
  /** The file that was looked for. */
  path: string;
  /** false when the default file did not exist (defaults and environment only). */
  fileFound: boolean;
}

/**
 * Reads, validates and applies the environment: defaults < file < environment. Throws one
 * ConfigError with every problem of the file and of the environment together.
 */
export async function loadConfig(options: LoadOptions = {}): Promise<LoadedConfig> {
  const env = options.env ?? process.env;
  const named = options.path ?? (env[CONFIG_PATH_ENV] || undefined);
  const path = named ?? DEFAULT_CONFIG_PATH;
  const text = await readConfigFile(path);
  // Only the default file may be absent (all defaults then): a file someone named and that is not
  // there is most likely a typo, and running on the defaults would hide it.
  if (text === undefined && named !== undefined) {
    throw new ConfigError(
      [`${path}: no such file (named by ${options.path !== undefined ? "--config" : CONFIG_PATH_ENV})`],
      `name an existing config file; only the default ${DEFAULT_CONFIG_PATH} may be absent, which means all defaults`,
    );
  }
  const problems: string[] = [];
  const warnings: string[] = [];

  let raw: unknown;
  if (text !== undefined) {
    const parsed = parseConfigText(text, path);
    if (parsed.ok) {
      raw = parsed.raw;
      warnings.push(...parsed.warnings);
    } else problems.push(parsed.problem);
  }
  const validated = validateConfig(raw);
  problems.push(...validated.problems);

  const overridden = applyEnvOverrides(validated.config, env);
  problems.push(...overridden.problems);
  // Cross-checks run on the final config (validateConfig's own warnings saw the file alone).
  warnings.push(...overridden.warnings, ...crossCheck(overridden.config));
  // The file alone was cross-checked by validateConfig; the environment may have changed it.
  for (const problem of crossProblems(overridden.config)) if (!problems.includes(problem)) problems.push(problem);

  if (problems.length > 0) {
    throw new ConfigError(
      problems,
      `fix the listed settings in ${path} (or the EBS_CACHE_AGENT_* environment variables) and run again`,
    );
  }
  return { config: overridden.config, warnings, path, fileFound: text !== undefined };
}
