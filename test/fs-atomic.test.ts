/**
 * writeFileAtomic (src/fs-atomic.ts), the one way the agent replaces a file, on a real filesystem;
 * and the rule that nothing else in src/ renames a file into place.
 */
import { mkdir, mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { writeFileAtomic } from "../src/fs-atomic.ts";

const dir = await mkdtemp(join(tmpdir(), "fs-atomic-"));
t.teardown(() => rm(dir, { recursive: true, force: true }));

t.test("writes a new file, replaces it whole, leaves no temp file", async (t) => {
  const path = join(dir, "state.json");
  await writeFileAtomic(path, "one\n");
  t.equal(await readFile(path, "utf8"), "one\n");
  await writeFileAtomic(path, Buffer.from("two\n"));
  t.equal(await readFile(path, "utf8"), "two\n");
  t.same(await readdir(dir), ["state.json"], "only the file itself");
});

t.test("the mode asked for, whatever the umask", async (t) => {
  const path = join(dir, "daemon.json");
  const old = process.umask(0o077);
  try {
    await writeFileAtomic(path, "{}\n", { mode: 0o644 });
  } finally {
    process.umask(old);
  }
  t.equal((await stat(path)).mode & 0o777, 0o644);
  await writeFileAtomic(path, "{}\n", { mode: 0o600 });
  t.equal((await stat(path)).mode & 0o777, 0o600, "a rewrite gets the mode given");
});

t.test("a failed write throws, keeps the old file and removes its temp file", async (t) => {
  const target = join(dir, "occupied");
  await mkdir(join(target, "inside"), { recursive: true });
  await t.rejects(writeFileAtomic(target, "x"), { code: /EISDIR|ENOTEMPTY|EEXIST/ }, "a rename over a folder fails");
  t.ok((await stat(target)).isDirectory(), "the folder is untouched");
  t.same(
    (await readdir(dir)).filter((name) => name.endsWith(".tmp")),
    [],
    "no temp file left",
  );
  await t.rejects(writeFileAtomic(join(dir, "missing", "f"), "x"), { code: "ENOENT" }, "the folder must exist");
});

/** Renames in src/ that are not a file write: a folder or symlink put in place whole. */
const OTHER_RENAMES = new Set([
  "fs-atomic.ts",
  "lab/reaper/labdir.ts",
  "lab/volumes/loopdev.ts",
  "lab/machines/nspawn-rootfs.ts",
  // a layer file moved into the archive's folder before it is packed, not a write in place
  "lab/docker/images.ts",
  // a dead run's subnet reservation renamed away, so that of runs racing to take it over one wins
  "lab/machines/lab-subnet.ts",
  // a golden build kept for a test run: a sparse copy (cp, gigabytes of holes) put in place whole
  "lab/volumes/golden-reuse.ts",
]);

t.test("no other atomic-write code in src/: every rename is writeFileAtomic's or a folder's", async (t) => {
  const src = join(import.meta.dirname, "..", "src");
  const renaming: string[] = [];
  for (const entry of await readdir(src, { recursive: true })) {
    if (entry.endsWith(".ts") && /\brename\(/.test(await readFile(join(src, entry), "utf8"))) renaming.push(entry);
  }
  t.ok(renaming.includes("fs-atomic.ts"), "the scan finds the one");
  t.same(
    renaming.filter((file) => !OTHER_RENAMES.has(file)),
    [],
  );
});
