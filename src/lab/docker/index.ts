/** docker: see docs/lab.md. */
export * from "./dockerd.ts";
export * from "./engine-choice.ts";
export * from "./images.ts";
export * from "./registry.ts";
