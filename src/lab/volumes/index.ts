/** volumes: see docs/lab.md. */
export * from "./cold.ts";
export * from "./golden.ts";
export * from "./loopdev.ts";
export * from "./loopstate.ts";
export * from "./volumes.ts";
export * from "./ebs-model.ts";
