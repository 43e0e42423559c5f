/** imds: see docs/lab.md. */
export * from "./imds.ts";
