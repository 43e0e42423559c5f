/** Docker engine versions as the engine and the volume tags give them: one parse, for the adapters and the rules. */

/** The major version of a docker version (`29.0.1` → 29, `20.10.24+dfsg1` → 20), or undefined. */
export function engineMajorVersion(serverVersion: string | undefined): number | undefined {
  const match = /^(\d+)\./.exec(serverVersion ?? "");
  return match ? Number(match[1]) : undefined;
}
