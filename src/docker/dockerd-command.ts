/**
 * dockerd's effective command line on a systemd host: what `systemctl show docker.service`
 * says (ExecStart, Environment, EnvironmentFiles, the unit's files), with `$VAR` / `${VAR}`
 * expanded as systemd expands them at exec time, each argument traced to the file it came from.
 * The parsing and expansion are pure (tested on recorded systemctl output); one adapter runs
 * systemctl and reads the files it names.
 */
import { readFile, stat } from "node:fs/promises";
import { basename } from "node:path";
import { describeError } from "../errors.ts";
import { run } from "../exec.ts";
import type { Logger } from "../log.ts";
import type { DockerdArg, DockerdCommand, HostProblem } from "./dockerd-flags.ts";

/** The properties of `systemctl show <unit> -p …` the agent reads. */
export interface UnitProperties {
  loadState?: string;
  /** Each ExecStart= in force: the program and its argv, unexpanded (argv[0] included). */
  execStart: Array<{ path: string; argv: string[] }>;
  /** Environment= assignments (`KEY=value`), in order. */
  environment: string[];
  environmentFiles: Array<{ path: string; optional: boolean }>;
  fragmentPath?: string;
  dropInPaths: string[];
}

/** The systemctl properties to ask for. */
export const SHOW_PROPERTIES = [
  "LoadState",
  "ExecStart",
  "Environment",
  "EnvironmentFiles",
  "FragmentPath",
  "DropInPaths",
];

/**
 * Parses `systemctl show` output. ExecStart reads `{ path=… ; argv[]=… ; ignore_errors=… ; … }`;
 * systemd (252 at least) joins argv with single spaces and no quoting, so an argument holding a
 * space comes back split: harmless here, a flag's name never holds one.
 */
export function parseSystemctlShow(text: string): UnitProperties {
  const props: UnitProperties = { execStart: [], environment: [], environmentFiles: [], dropInPaths: [] };
  for (const line of text.split("\n")) {
    const eq = line.indexOf("=");
    if (eq <= 0) continue;
    const key = line.slice(0, eq);
    const value = line.slice(eq + 1);
    switch (key) {
      case "LoadState":
        props.loadState = value.trim();
        break;
      case "ExecStart": {
        const match = /^\{ path=(.*?) ; argv\[\]=(.*) ; ignore_errors=(?:yes|no) ; /.exec(value);
        if (match) props.execStart.push({ path: match[1]!, argv: match[2]!.split(/\s+/).filter(Boolean) });
        break;
      }
      case "Environment":
        props.environment.push(...splitQuoted(value));
        break;
      case "EnvironmentFiles": {
        const match = /^(.*?) \(ignore_errors=(yes|no)\)$/.exec(value.trim());
        if (match) props.environmentFiles.push({ path: match[1]!, optional: match[2] === "yes" });
        else if (value.trim() !== "") props.environmentFiles.push({ path: value.trim(), optional: false });
        break;
      }
      case "FragmentPath":
        if (value.trim() !== "") props.fragmentPath = value.trim();
        break;
      case "DropInPaths":
        props.dropInPaths.push(...value.split(/\s+/).filter(Boolean));
        break;
    }
  }
  return props;
}

/** Words separated by whitespace, with "…" and '…' quoting and backslash escapes (systemd's word rules). */
export function splitQuoted(text: string): string[] {
  const words: string[] = [];
  let word: string | undefined;
  let quote: '"' | "'" | undefined;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i]!;
    if (quote) {
      if (c === quote) quote = undefined;
      else if (c === "\\" && quote === '"' && i + 1 < text.length) word += unescape(text[(i += 1)]!);
      else word += c;
      continue;
    }
    if (/\s/.test(c)) {
      if (word !== undefined) words.push(word);
      word = undefined;
    } else if (c === '"' || c === "'") {
      quote = c;
      word ??= "";
    } else if (c === "\\" && i + 1 < text.length) {
      word = (word ?? "") + unescape(text[(i += 1)]!);
    } else {
      word = (word ?? "") + c;
    }
  }
  if (word !== undefined) words.push(word);
  return words;
}

function unescape(c: string): string {
  return c === "n" ? "\n" : c === "t" ? "\t" : c;
}

/**
 * An EnvironmentFile= as systemd reads it: `KEY=value` lines, `#` and `;` comments, values
 * quoted with "…" or '…' (the quotes go), backslash escapes, a trailing backslash continuing
 * the line; lines without a valid name are ignored (systemd ignores them too, with a warning).
 */
export function parseEnvironmentFile(text: string): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  const logical = text.replace(/\\\r?\n/g, "").split(/\r?\n/);
  for (const raw of logical) {
    const line = raw.trimStart();
    if (line === "" || line.startsWith("#") || line.startsWith(";")) continue;
    const eq = line.indexOf("=");
    if (eq <= 0) continue;
    const key = line.slice(0, eq).trim();
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) continue;
    out.push([key, unquoteValue(line.slice(eq + 1).trimStart())]);
  }
  return out;
}

function unquoteValue(text: string): string {
  let value = "";
  let quote: '"' | "'" | undefined;
  let trailing = 0; // unquoted whitespace at the end is dropped
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i]!;
    if (quote) {
      if (c === quote) quote = undefined;
      else if (c === "\\" && quote === '"' && i + 1 < text.length) value += text[(i += 1)];
      else value += c;
      trailing = 0;
    } else if (c === '"' || c === "'") {
      quote = c;
      trailing = 0;
    } else if (c === "\\" && i + 1 < text.length) {
      value += text[(i += 1)];
      trailing = 0;
    } else {
      value += c;
      trailing = /\s/.test(c) ? trailing + 1 : 0;
    }
  }
  return trailing > 0 ? value.slice(0, value.length - trailing) : value;
}

/** A unit file (fragment or drop-in) as read, for tracing which file set what. */
export interface UnitFile {
  path: string;
  text: string;
}

/** Which file holds the ExecStart= in force, and which file last assigned each Environment= name. */
export function traceUnitFiles(files: readonly UnitFile[]): { execStart?: string; environment: Map<string, string> } {
  let execStart: string | undefined;
  const environment = new Map<string, string>();
  for (const file of files) {
    let inService = false;
    for (const raw of file.text.split(/\r?\n/)) {
      const line = raw.trim();
      if (line.startsWith("[")) {
        inService = line === "[Service]";
        continue;
      }
      if (!inService) continue;
      const match = /^(ExecStart|Environment)\s*=\s*(.*)$/.exec(line);
      if (!match) continue;
      if (match[1] === "ExecStart") execStart = match[2] === "" ? undefined : file.path;
      else for (const word of splitQuoted(match[2]!)) environment.set(word.split("=", 1)[0]!, file.path);
    }
  }
  return { ...(execStart ? { execStart } : {}), environment };
}

/** What the pure expansion needs: the properties, the environment files' texts, the unit's files. */
export interface UnitSnapshot {
  unit: string;
  props: UnitProperties;
  /** Text of each EnvironmentFile= (undefined: missing). */
  environmentFiles: Map<string, string | undefined>;
  unitFiles: UnitFile[];
}

/**
 * dockerd's arguments as systemd will pass them: `$VAR` as a word of its own is replaced by
 * the value split at whitespace (zero or more arguments), `${VAR}` by the value as is (within
 * one argument), `$$` by `$`; EnvironmentFile= values override Environment= ones, later files
 * earlier ones; an unset variable is empty.
 */
export function effectiveDockerdCommand(snapshot: UnitSnapshot): DockerdCommand {
  const { unit, props } = snapshot;
  const problems: HostProblem[] = [];
  if (props.loadState !== undefined && props.loadState !== "loaded") {
    problems.push({
      problem: `${unit} is ${props.loadState || "unknown"} to systemd: the agent cannot tell how docker starts`,
      remediation: `install docker's unit, or set docker.unit in the agent's config to the unit that runs dockerd`,
    });
    return { source: unit, args: [], problems };
  }
  const traced = traceUnitFiles(snapshot.unitFiles);
  const env = new Map<string, { value: string; origin: string }>();
  for (const assignment of props.environment) {
    const eq = assignment.indexOf("=");
    if (eq <= 0) continue;
    const name = assignment.slice(0, eq);
    const file = traced.environment.get(name);
    env.set(name, { value: assignment.slice(eq + 1), origin: `${name} in ${file ?? unit} (Environment= of ${unit})` });
  }
  for (const { path, optional } of props.environmentFiles) {
    const text = snapshot.environmentFiles.get(path);
    if (text === undefined) {
      if (!optional) {
        problems.push({
          problem: `${unit} reads EnvironmentFile=${path}, which is missing: systemd will not start docker`,
          remediation: `create ${path}, or write EnvironmentFile=-${path} (optional) in ${unit}`,
        });
      }
      continue;
    }
    for (const [name, value] of parseEnvironmentFile(text))
      env.set(name, { value, origin: `${name} in ${path} (EnvironmentFile of ${unit})` });
  }
  const exec = props.execStart.find(
    (e) => basename(e.path) === "dockerd" || e.argv.some((a) => basename(a) === "dockerd"),
  );
  if (!exec) {
    problems.push({
      problem:
        `no ExecStart of ${unit} runs dockerd (${props.execStart.map((e) => e.path).join(", ") || "none"}): the ` +
        `agent cannot check docker's flags`,
      remediation:
        `make ${unit}'s ExecStart run dockerd itself, or set docker.unit in the agent's config to the unit that ` +
        `does`,
    });
    return { source: unit, args: [], problems };
  }
  const origin = `ExecStart in ${traced.execStart ?? snapshot.props.fragmentPath ?? unit}`;
  // dockerd's own word, or argv[0] when `@` gave the program another name.
  const own = exec.argv.findIndex((a) => basename(a) === "dockerd");
  const args: DockerdArg[] = [];
  for (const word of exec.argv.slice(own >= 0 ? own + 1 : 1)) {
    const whole = /^\$([A-Za-z_][A-Za-z0-9_]*)$/.exec(word);
    if (whole) {
      const found = env.get(whole[1]!);
      for (const part of (found?.value ?? "").split(/\s+/).filter(Boolean))
        args.push({ value: part, origin: found!.origin });
      continue;
    }
    let from = origin;
    const value = word.replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (match, name: string | undefined) => {
      if (name === undefined) return "$";
      const found = env.get(name);
      if (found) from = found.origin;
      return found?.value ?? "";
    });
    args.push({ value, origin: from });
  }
  return { source: unit, args, problems };
}

export interface SystemdDockerdCommandOptions {
  /** The unit that runs dockerd (default `docker.service`). */
  unit?: string;
  systemctl?: string;
  log?: Logger;
  /** Exists when systemd runs this host (sd_booted()); default /run/systemd/system. */
  systemdRuntimeDir?: string;
}

/** Reads dockerd's effective command line from systemd and the files its unit names. */
export function createSystemdDockerdCommand(options: SystemdDockerdCommandOptions = {}): () => Promise<DockerdCommand> {
  const unit = options.unit ?? "docker.service";
  const systemctl = options.systemctl ?? "systemctl";
  const runtimeDir = options.systemdRuntimeDir ?? "/run/systemd/system";
  return async () => {
    // Without systemd no unit starts dockerd (a container, the lab's CLI runs): nothing to read.
    if (!(await isDirectory(runtimeDir))) {
      return {
        source: unit,
        args: [],
        problems: [],
        unknown: `systemd does not run this host (no ${runtimeDir}): no ${unit} to read`,
      };
    }
    const args = ["show", unit, ...SHOW_PROPERTIES.flatMap((p) => ["-p", p])];
    let text: string;
    try {
      text = (await run(systemctl, args, { log: options.log, timeoutMs: 30_000 })).stdout;
    } catch (error) {
      return {
        source: unit,
        args: [],
        problems: [
          {
            problem:
              `could not read ${unit} from systemd (${describeError(error)}): the agent cannot check docker's ` +
              `flags`,
            remediation: `check that systemd runs this host and knows ${unit} (systemctl show ${unit})`,
          },
        ],
      };
    }
    const props = parseSystemctlShow(text);
    const environmentFiles = new Map<string, string | undefined>();
    for (const { path } of props.environmentFiles) environmentFiles.set(path, await readText(path));
    const unitFiles: UnitFile[] = [];
    for (const path of [props.fragmentPath, ...props.dropInPaths]) {
      const content = path === undefined ? undefined : await readText(path);
      if (path !== undefined && content !== undefined) unitFiles.push({ path, text: content });
    }
    return effectiveDockerdCommand({ unit, props, environmentFiles, unitFiles });
  };
}

async function readText(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, "utf8");
  } catch {
    return undefined;
  }
}

async function isDirectory(path: string): Promise<boolean> {
  return stat(path).then(
    (info) => info.isDirectory(),
    () => false,
  );
}
