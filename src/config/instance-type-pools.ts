/**
 * Config `instanceTypePools`: which pool (and so which volume size) a machine claims from, by its
 * EC2 instance type (IMDS `instance-type`). One rule a string, `PATTERN=POOL:SIZEGIB`
 * (`g4dn.*=gpu:500`): PATTERN is an instance type with `*` standing for any run of characters,
 * the way EC2 writes families (`g4dn.*`, `m5*.large`). The keeper stocks each pool of a rule
 * with volumes of its size; a type no rule matches uses `pool` at its snapshot's size.
 *
 * The patterns may not overlap (some type matching two of them): which pool a machine gets must
 * not depend on the order of a list. Pure.
 */
import { validatePoolName } from "../inputs.ts";

export interface InstanceTypePool {
  /** The rule as written, for messages. */
  text: string;
  pattern: string;
  pool: string;
  sizeGiB: number;
}

/** The largest EBS gp3/io2 volume, in GiB (16 TiB). */
export const MAX_POOL_SIZE_GIB = 16384;

/** What an instance type may hold (`g4dn.8xlarge`, `u-6tb1.metal`, `m7i-flex.large`), with `*` in a pattern. */
const PATTERN = /^[a-z0-9.*-]{1,64}$/;

/** A rule, or what is wrong with it. */
export function parseInstanceTypePool(
  text: string,
): { ok: true; rule: InstanceTypePool } | { ok: false; problem: string } {
  const form = /^([^=]*)=([^:]*):([^:]*)$/.exec(text);
  if (!form)
    return { ok: false, problem: `must be PATTERN=POOL:SIZEGIB (g4dn.*=gpu:500), got ${JSON.stringify(text)}` };
  const [, pattern, pool, size] = form as unknown as [string, string, string, string];
  if (!PATTERN.test(pattern) || !/[a-z0-9]/.test(pattern))
    return {
      ok: false,
      problem:
        `the pattern of ${JSON.stringify(text)} must be an instance type in lower case, with * for any ` +
        `characters (g4dn.*, m5.large)`,
    };
  const name = validatePoolName(pool);
  if (!name.ok) return { ok: false, problem: `the pool of ${JSON.stringify(text)}: ${name.problem}` };
  const sizeGiB = /^[0-9]{1,5}$/.test(size) ? Number(size) : NaN;
  if (!(sizeGiB >= 1 && sizeGiB <= MAX_POOL_SIZE_GIB))
    return {
      ok: false,
      problem: `the size of ${JSON.stringify(text)} must be a whole number of GiB from 1 to ${MAX_POOL_SIZE_GIB}`,
    };
  return { ok: true, rule: { text, pattern, pool, sizeGiB } };
}

/** Whether `pattern` (`*` for any run of characters) matches the whole instance type. */
export function matchesInstanceType(pattern: string, instanceType: string): boolean {
  return globsOverlap(pattern, instanceType);
}

/**
 * Whether some string matches both patterns (a pattern without `*` is one string). Two glob
 * patterns meet when they can be aligned: a literal meets the same literal, a `*` either ends or
 * takes the other's next character (or the other's `*`, which then ends first).
 */
export function globsOverlap(a: string, b: string): boolean {
  const seen = new Map<number, boolean>();
  const meet = (i: number, j: number): boolean => {
    const key = i * (b.length + 1) + j;
    const known = seen.get(key);
    if (known !== undefined) return known;
    let result: boolean;
    if (i === a.length && j === b.length) result = true;
    else if (a[i] === "*") result = meet(i + 1, j) || (j < b.length && meet(i, j + 1));
    else if (b[j] === "*") result = meet(i, j + 1) || (i < a.length && meet(i + 1, j));
    else result = i < a.length && j < b.length && a[i] === b[j] && meet(i + 1, j + 1);
    seen.set(key, result);
    return result;
  };
  return meet(0, 0);
}

/**
 * Every problem of a list of rules: each rule's own, two patterns that overlap, and a pool given
 * two sizes (a pool's volumes are of one size: the keeper stocks it, any machine of its rules
 * claims from it).
 */
export function instanceTypePoolProblems(texts: readonly string[]): string[] {
  const problems: string[] = [];
  const rules: InstanceTypePool[] = [];
  for (const text of texts) {
    const parsed = parseInstanceTypePool(text);
    if (parsed.ok) rules.push(parsed.rule);
    else problems.push(parsed.problem);
  }
  for (const [i, a] of rules.entries()) {
    for (const b of rules.slice(i + 1)) {
      if (globsOverlap(a.pattern, b.pattern))
        problems.push(
          `${JSON.stringify(a.text)} and ${JSON.stringify(b.text)} overlap (an instance type matches both ` +
            `${a.pattern} and ${b.pattern}): make the patterns disjoint`,
        );
      if (a.pool === b.pool && a.sizeGiB !== b.sizeGiB)
        problems.push(
          `${JSON.stringify(a.text)} and ${JSON.stringify(b.text)} give pool ${a.pool} two sizes: a pool's ` +
            `volumes are of one size; use one size, or two pools`,
        );
    }
  }
  return problems;
}

/** The rules of a list that parse (validate with instanceTypePoolProblems first). */
export function parseInstanceTypePools(texts: readonly string[]): InstanceTypePool[] {
  return texts.flatMap((text) => {
    const parsed = parseInstanceTypePool(text);
    return parsed.ok ? [parsed.rule] : [];
  });
}

/** The rule whose pattern matches the instance type, if any (the patterns do not overlap). */
export function ruleForInstanceType(
  rules: readonly InstanceTypePool[],
  instanceType: string | undefined,
): InstanceTypePool | undefined {
  return instanceType === undefined ? undefined : rules.find((r) => matchesInstanceType(r.pattern, instanceType));
}

/**
 * The pools the keeper stocks, each with the size of its volumes: `pool` (at its snapshot's
 * size, undefined, unless a rule names it) and every pool of a rule, in the order first named.
 */
export function stockedPools(
  defaultPool: string,
  rules: readonly InstanceTypePool[],
): Array<{ pool: string; sizeGiB?: number }> {
  const pools = new Map<string, number | undefined>([[defaultPool, undefined]]);
  for (const rule of rules) pools.set(rule.pool, rule.sizeGiB);
  return [...pools].map(([pool, sizeGiB]) => (sizeGiB === undefined ? { pool } : { pool, sizeGiB }));
}
