/**
 * `Filter.N` semantics as EC2 applies them: the values of one filter are OR-ed, separate
 * filters are AND-ed, values may hold `*` (any run of characters) and `?` (one character),
 * `\` escapes those, and matching is case-sensitive. `tag:<key>`, `tag-key` and `tag-value`
 * work on every taggable resource.
 */
import { Ec2Error } from "./ec2-error.ts";
import type { FilterParam } from "./params.ts";

/** For each supported filter name, the values of an item that the filter is matched against. */
export type FilterFields<T> = Record<string, (item: T) => readonly (string | number | boolean | null | undefined)[]>;

/** Compiles one filter value to a whole-string regular expression. */
export function wildcardToRegExp(pattern: string): RegExp {
  let source = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i] as string;
    if (c === "\\" && i + 1 < pattern.length) {
      source += escapeRegExp(pattern[++i] as string);
    } else if (c === "*") {
      source += "[\\s\\S]*";
    } else if (c === "?") {
      source += "[\\s\\S]";
    } else {
      source += escapeRegExp(c);
    }
  }
  return new RegExp(`^${source}$`);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
}

/** Whether `value` matches any of the filter values. */
export function matchesAny(value: string, patterns: readonly RegExp[]): boolean {
  return patterns.some((re) => re.test(value));
}

/**
 * Keeps the items that pass every filter. Unknown filter names are InvalidParameterValue, as
 * EC2 answers (silently ignoring them would hide typos in the agent's filters).
 */
export function applyFilters<T>(
  items: readonly T[],
  filters: readonly FilterParam[],
  fields: FilterFields<T>,
  tagsOf?: (item: T) => Record<string, string>,
): T[] {
  const tests = filters.map((filter) => compile(filter, fields, tagsOf));
  return items.filter((item) => tests.every((test) => test(item)));
}

function compile<T>(
  filter: FilterParam,
  fields: FilterFields<T>,
  tagsOf: ((item: T) => Record<string, string>) | undefined,
): (item: T) => boolean {
  if (filter.values.length === 0) {
    throw new Ec2Error("InvalidParameterValue", `The filter '${filter.name}' must have at least one value`);
  }
  const patterns = filter.values.map(wildcardToRegExp);
  if (tagsOf) {
    if (filter.name.startsWith("tag:")) {
      const key = filter.name.slice("tag:".length);
      return (item) => {
        const value = tagsOf(item)[key];
        return value !== undefined && matchesAny(value, patterns);
      };
    }
    if (filter.name === "tag-key") return (item) => Object.keys(tagsOf(item)).some((k) => matchesAny(k, patterns));
    if (filter.name === "tag-value") {
      return (item) => Object.values(tagsOf(item)).some((v) => matchesAny(v, patterns));
    }
  }
  const field = Object.hasOwn(fields, filter.name) ? fields[filter.name] : undefined;
  if (!field) throw new Ec2Error("InvalidParameterValue", `The filter '${filter.name}' is invalid`);
  return (item) =>
    field(item).some((value) => value !== null && value !== undefined && matchesAny(String(value), patterns));
}
