/** Reads and writes the snapshot build's manifest as JSON (its shape: src/agent/snapshot/manifest.ts), atomically. */
import { readFile } from "node:fs/promises";
import { writeFileAtomic } from "../fs-atomic.ts";

/** The parsed JSON at `path`, or undefined when there is no file; throws a message for anything else. */
export async function readManifestJson(path: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new Error(`cannot be read (${(error as Error).message})`, { cause: error });
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new Error("is not JSON");
  }
}

export async function writeManifestJson(path: string, manifest: unknown): Promise<void> {
  await writeFileAtomic(path, JSON.stringify(manifest, null, 1) + "\n");
}
