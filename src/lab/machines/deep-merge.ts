/**
 * Config overrides on top of a base, on its own: the in-process fakes (test/fixtures/fakes) merge
 * with it too, and importing it from ./agent.ts would load the whole EC2 wiring (the AWS SDK
 * included) into every test that only needs to merge two objects.
 */

/** Config overrides on top of a base: objects merged key by key, anything else replaced. */
export function deepMerge(a: Record<string, unknown>, b: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...a };
  for (const [key, value] of Object.entries(b)) {
    const prev = out[key];
    out[key] =
      value &&
      typeof value === "object" &&
      !Array.isArray(value) &&
      prev &&
      typeof prev === "object" &&
      !Array.isArray(prev)
        ? deepMerge(prev as Record<string, unknown>, value as Record<string, unknown>)
        : value;
  }
  return out;
}
