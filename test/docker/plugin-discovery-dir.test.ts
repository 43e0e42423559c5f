import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { missingFolders, removeCreatedFolders } from "../../src/docker/plugin-discovery-dir.ts";

async function scratch(t: { teardown(fn: () => unknown): void }): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "plugin-dir-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

t.test("the folders a dockerd made are removed, outermost last; what was there stays", async (t) => {
  const base = await scratch(t);
  const dir = join(base, "docker", "plugins");
  const created = missingFolders(dir);
  t.same(created, [join(base, "docker"), dir], "both missing, outermost first");
  await mkdir(dir, { recursive: true });
  await removeCreatedFolders(created);
  t.same(await readdir(base), [], "nothing left where there was nothing");
});

t.test("a folder that was there before is not the dockerd's", async (t) => {
  const base = await scratch(t);
  await mkdir(join(base, "docker"));
  const dir = join(base, "docker", "plugins");
  const created = missingFolders(dir);
  t.same(created, [dir]);
  await mkdir(dir);
  await removeCreatedFolders(created);
  t.same(await readdir(base), ["docker"], "the machine's /run/docker stays");
  t.same(await readdir(join(base, "docker")), []);
});

t.test("a plugin another dockerd registered since keeps its folder and those around it", async (t) => {
  const base = await scratch(t);
  const dir = join(base, "docker", "plugins");
  const created = missingFolders(dir);
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "x.sock"), "");
  await removeCreatedFolders(created);
  t.same(await readdir(dir), ["x.sock"]);
});

t.test("nothing missing, nothing to remove; folders already gone are no error", async (t) => {
  const base = await scratch(t);
  t.same(missingFolders(base), []);
  await removeCreatedFolders([join(base, "gone"), join(base, "gone", "plugins")]);
  t.same(await readdir(base), []);
});
