import t from "tap";
import { existsSync } from "node:fs";
import { chmod, readdir, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DaemonJsonError as TestFileError } from "../../src/docker/daemon-json.ts";
import {
  createOwnedFile,
  keepOriginal,
  ownedFilePaths,
  readOwnedFile,
  restoreOriginal,
  writeOwnedFile,
} from "../../src/docker/owned-file.ts";
import { tempFolders } from "../fixtures/builders/temp-folders.ts";

const folder = await tempFolders("ebs-cache-owned-file-");

const owned = (path: string) => createOwnedFile({ path, errorClass: TestFileError });

t.test("the original is kept across two writes; restore gives back its bytes and mode", async (t) => {
  const path = join(await folder(), "test.conf");
  const original = Buffer.from("owner's line\r\nno final newline");
  await writeFile(path, original);
  await chmod(path, 0o640);
  const file = owned(path);
  t.same(await file.change(() => "first\n"), { written: true, backup: file.backupPath }, "the first write keeps it");
  t.same(await file.change(() => "second\n"), { written: true }, "the second takes no backup");
  t.same(await readFile(file.backupPath), original, "the backup is the owner's original after two writes");
  t.equal((await stat(path)).mode & 0o7777, 0o640, "the mode is kept by every write");
  t.same(await file.change(() => undefined), { written: false }, "an edit that changes nothing writes nothing");
  t.equal(await readFile(path, "utf8"), "second\n");
  await chmod(path, 0o600);
  await file.restore();
  t.same(await readFile(path), original, "restored byte for byte");
  t.equal((await stat(path)).mode & 0o7777, 0o640, "restored with the owner's mode");
  await file.restore();
  t.same(await readFile(path), original, "restoring twice is the same");
  t.same((await readdir(join(path, ".."))).sort(), ["test.conf", "test.conf.ebs-cache-agent.bak"], "no temp file");
});

t.test("an absent original is restored as absent", async (t) => {
  const path = join(await folder(), "etc", "test.conf");
  const file = owned(path);
  t.equal((await file.change(() => undefined)).written, false);
  t.notOk(existsSync(path), "nothing to change: no file is made");
  t.same(
    await file.change(() => "made by the agent\n"),
    { written: true, backup: file.absentMarkerPath },
    "the folder is made too",
  );
  t.equal((await file.change(() => "changed again\n")).written, true);
  t.ok(existsSync(file.absentMarkerPath), "a marker says there was no file");
  t.notOk(existsSync(file.backupPath));
  await file.restore();
  t.notOk(existsSync(path), "restore removed the file");
  await file.restore();
  t.notOk(existsSync(path), "restoring twice is the same");
});

t.test("a stale backup of the other kind is removed when the original is kept", async (t) => {
  const dir = await folder();
  const path = join(dir, "test.conf");
  await writeFile(path + ".ebs-cache-agent.absent", "stale\n");
  await writeFile(path, "owner\n");
  await owned(path).change(() => "agent\n");
  t.notOk(existsSync(path + ".ebs-cache-agent.absent"), "the stale marker is gone");
  await writeFile(path + ".ebs-cache-agent.bak", "stale\n");
  const absent = join(dir, "none.conf");
  await writeFile(absent + ".ebs-cache-agent.bak", "stale\n");
  const file = owned(absent);
  await file.change(() => "agent\n");
  t.notOk(existsSync(file.backupPath), "the stale backup is gone");
  await file.restore();
  t.notOk(existsSync(absent));
});

t.test("changes of one file are queued: none is lost", async (t) => {
  const path = join(await folder(), "counter");
  await writeFile(path, "0");
  const file = owned(path);
  await Promise.all(
    Array.from({ length: 20 }, () => file.change((current) => String(Number(current.bytes?.toString()) + 1))),
  );
  t.equal(await readFile(path, "utf8"), "20", "twenty read-modify-writes, twenty increments");
  await file.restore();
  t.equal(await readFile(path, "utf8"), "0");
});

t.test("an edit that throws changes nothing and takes no backup", async (t) => {
  const dir = await folder();
  const path = join(dir, "test.conf");
  await writeFile(path, "owner\n");
  const file = owned(path);
  await t.rejects(
    file.change(() => {
      throw new TestFileError(path, "refused", "fix it");
    }),
    TestFileError,
  );
  t.same(await readdir(dir), ["test.conf"]);
  await t.rejects(file.restore(), TestFileError, "no backup to restore");
  t.equal(await readFile(path, "utf8"), "owner\n");
});

t.test("a crash between the steps leaves the old state or the new one", async (t) => {
  const dir = await folder();
  const path = join(dir, "test.conf");
  const paths = ownedFilePaths(path, TestFileError);
  await writeFile(path, "owner\n", { mode: 0o600 });

  // Killed after the backup, before the write: the file is still the owner's, and a later run
  // (a new instance) restores it as it is.
  const before = await readOwnedFile(path, TestFileError);
  await keepOriginal(paths, before);
  t.equal(await readFile(path, "utf8"), "owner\n", "old state: the file as the owner left it");
  t.equal(await restoreOriginal(paths), "restored");
  t.equal(await readFile(path, "utf8"), "owner\n");

  // Killed after the write: the new state, with the original beside it.
  await writeOwnedFile(paths, before, "agent\n");
  t.equal(await readFile(path, "utf8"), "agent\n", "new state");
  t.equal(await readFile(paths.backupPath, "utf8"), "owner\n");
  t.equal(
    await owned(path)
      .restore()
      .then(() => readFile(path, "utf8")),
    "owner\n",
    "a new run restores it",
  );
  t.equal((await stat(path)).mode & 0o7777, 0o600);

  // A missing file: before the marker there is nothing to restore from, and restore refuses
  // rather than guess; killed after the marker, before the write, the file is still missing.
  const missing = join(dir, "missing.conf");
  const missingPaths = ownedFilePaths(missing, TestFileError);
  await t.rejects(restoreOriginal(missingPaths), TestFileError, "nothing to restore from: refused");
  await keepOriginal(missingPaths, await readOwnedFile(missing, TestFileError));
  t.notOk(existsSync(missing), "old state: still no file");
  t.equal(await restoreOriginal(missingPaths), "removed");
  t.notOk(existsSync(missing));
});

t.test("a file that is not a regular file is refused", async (t) => {
  const dir = await folder();
  await t.rejects(
    owned(dir).change(() => "x"),
    TestFileError,
  );
  t.ok((await stat(dir)).isDirectory());
});
