/** reaper: see docs/lab.md. */
export * from "./cleanup.ts";
export * from "./devices.ts";
export * from "./janitor.ts";
export * from "./labdir.ts";
export * from "./labroot.ts";
export * from "./procinfo.ts";
