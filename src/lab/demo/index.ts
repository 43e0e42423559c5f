/** demo: see docs/lab.md. */
export * from "./demo.ts";
export * from "./engine.ts";
export * from "./osparc.ts";
