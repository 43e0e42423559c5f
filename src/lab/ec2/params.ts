/**
 * Decoding the flat Query-protocol parameters into what the actions need. Lists arrive as
 * `Name.1`, `Name.2` … (1-based, possibly out of order), structures as `Name.N.Member`, e.g.
 * `Filter.1.Name`, `Filter.1.Value.1`, `TagSpecification.1.Tag.1.Key`.
 */
import { invalidValue, missingParameter } from "./ec2-error.ts";

/** One `Filter.N`: a name and the values any of which may match. */
export interface FilterParam {
  name: string;
  values: string[];
}

/** One `Tag.N`; a DeleteTags tag may come without a value (meaning "whatever the value"). */
export interface TagParam {
  key: string;
  value: string | undefined;
}

/** One `TagSpecification.N`. */
export interface TagSpecificationParam {
  resourceType: string | undefined;
  tags: TagParam[];
}

/** The parameters of one request, with typed accessors that raise EC2's own errors. */
export class Params {
  private readonly map: Map<string, string>;

  constructor(entries: Iterable<[string, string]>) {
    this.map = new Map(entries);
  }

  /** Every parameter, for logging. */
  entries(): [string, string][] {
    return [...this.map.entries()];
  }

  /** The action name (`Action=`). */
  get action(): string | undefined {
    return this.map.get("Action");
  }

  has(name: string): boolean {
    return this.map.has(name);
  }

  str(name: string): string | undefined {
    return this.map.get(name);
  }

  /** A required string: absent or empty is MissingParameter. */
  required(name: string): string {
    const value = this.map.get(name);
    if (value === undefined || value === "") throw missingParameter(name);
    return value;
  }

  /** An integer parameter; a non-integer is InvalidParameterValue. */
  int(name: string): number | undefined {
    const text = this.map.get(name);
    if (text === undefined) return undefined;
    if (!/^-?\d+$/.test(text.trim())) throw invalidValue(name, text);
    return Number(text);
  }

  /** A boolean parameter (`true`/`false`, case-insensitive as EC2 accepts). */
  bool(name: string): boolean {
    const text = this.map.get(name);
    if (text === undefined) return false;
    const lower = text.toLowerCase();
    if (lower === "true") return true;
    if (lower === "false") return false;
    throw invalidValue(name, text);
  }

  /** The indexes N present under `prefix.N…`, ascending. */
  private indexes(prefix: string): number[] {
    const found = new Set<number>();
    const head = `${prefix}.`;
    for (const key of this.map.keys()) {
      if (!key.startsWith(head)) continue;
      const match = /^(\d+)(?:\.|$)/.exec(key.slice(head.length));
      if (match?.[1] !== undefined) found.add(Number(match[1]));
    }
    return [...found].sort((a, b) => a - b);
  }

  /** A list of strings `prefix.1`, `prefix.2` … in index order. */
  list(prefix: string): string[] {
    const out: string[] = [];
    for (const n of this.indexes(prefix)) {
      const value = this.map.get(`${prefix}.${n}`);
      if (value !== undefined) out.push(value);
    }
    return out;
  }

  /** `Filter.N.Name` / `Filter.N.Value.M`. A filter without a name is MissingParameter. */
  filters(prefix = "Filter"): FilterParam[] {
    return this.indexes(prefix).map((n) => {
      const name = this.map.get(`${prefix}.${n}.Name`);
      if (name === undefined || name === "") throw missingParameter(`${prefix}.${n}.Name`);
      return { name, values: this.list(`${prefix}.${n}.Value`) };
    });
  }

  /** `prefix.N.Key` / `prefix.N.Value`. A tag without a key is MissingParameter. */
  tags(prefix = "Tag"): TagParam[] {
    return this.indexes(prefix).map((n) => {
      const key = this.map.get(`${prefix}.${n}.Key`);
      if (key === undefined) throw missingParameter(`${prefix}.${n}.Key`);
      return { key, value: this.map.get(`${prefix}.${n}.Value`) };
    });
  }

  /** `TagSpecification.N.ResourceType` and `TagSpecification.N.Tag.M.*`. */
  tagSpecifications(prefix = "TagSpecification"): TagSpecificationParam[] {
    return this.indexes(prefix).map((n) => ({
      resourceType: this.map.get(`${prefix}.${n}.ResourceType`),
      tags: this.tags(`${prefix}.${n}.Tag`),
    }));
  }
}
