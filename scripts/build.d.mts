// Types of scripts/build.mjs for the TypeScript that imports it (bench/).
import type { Metafile } from "esbuild";

export function buildAgent(outdir?: string, root?: string): Promise<Metafile>;
export function buildLab(outdir?: string, root?: string): Promise<Metafile>;
