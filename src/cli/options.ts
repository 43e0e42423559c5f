/**
 * The options several commands share, and the parsers of option values. A value a parser refuses
 * is a usage error (commander's InvalidArgumentError: exit 2, with the command's usage line), as
 * an unknown option is.
 */
import { InvalidArgumentError } from "commander";
import { validatePoolName } from "../inputs.ts";

/** `--config`: every command reads the same file. */
export const CONFIG_OPTION = [
  "-c, --config <path>",
  "config file (default /etc/ebs-cache-agent/config.json, or $EBS_CACHE_AGENT_CONFIG; a file named here must exist)",
] as const;

/** Parses a whole number option (commander). */
export function wholeNumber(value: string): number {
  const n = value.trim() === "" ? Number.NaN : Number(value);
  if (!Number.isSafeInteger(n) || n < 0)
    throw new InvalidArgumentError(`expected a whole number, got ${JSON.stringify(value)}`);
  return n;
}

/** Parses a pool name option (commander): the rules of the `pool` setting; a bad one is a usage error. */
export function poolNameOption(value: string): string {
  const check = validatePoolName(value);
  if (!check.ok) throw new InvalidArgumentError(check.problem);
  return check.value;
}
