/** machines: see docs/lab.md. */
export * from "./agent.ts";
export * from "./autoscaler.ts";
export * from "./deep-merge.ts";
export * from "./nspawn-docker.ts";
export * from "./nspawn-golden.ts";
export * from "./nspawn-host.ts";
export * from "./nspawn-journal.ts";
export * from "./nspawn-rootfs.ts";
export * from "./nspawn.ts";
export * from "./osparc-swarm.ts";
