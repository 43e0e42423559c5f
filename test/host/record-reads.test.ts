/**
 * Removing the read-only view the containerd store's recording makes: ctr makes it under no
 * lease, so containerd's garbage collector may remove it first, and "not found" is then the
 * state wanted; any other failure is an error. And the need list written on a temp folder standing
 * for the volume. No root (the recording itself: test/host/record-reads.lab.test.ts).
 */
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { AgentError } from "../../src/errors.ts";
import type { RunOptions, RunResult } from "../../src/exec.ts";
import { removeView, writeImageReads, type ContainerdCli } from "../../src/host/record-reads.ts";
import { VolumePathError } from "../../src/host/volume-paths.ts";
import { MAX_READ_LIST_FILES, READ_LIST_FILE } from "../../src/read-list.ts";
import { makeSpecial } from "../fixtures/builders/odd-files.ts";

const ARGS = ["snapshots", "--snapshotter", "overlayfs", "rm", "ebs-cache-record-reads-1"];

/** A ctr that answers every command with `result` and records what it was asked. */
function fakeCtr(result: RunResult): {
  cli: ContainerdCli;
  calls: Array<{ args: readonly string[]; options?: RunOptions }>;
} {
  const calls: Array<{ args: readonly string[]; options?: RunOptions }> = [];
  return {
    calls,
    cli: {
      ctr: async (args, options) => {
        calls.push({ args, ...(options ? { options } : {}) });
        if (result.exitCode !== 0 && options?.check !== false) throw new Error("a check the caller did not want");
        return result;
      },
    },
  };
}

t.test("the view removed", async (t) => {
  const ctr = fakeCtr({ exitCode: 0, stdout: "", stderr: "" });
  await removeView(ctr.cli, ARGS, undefined);
  t.same(
    ctr.calls.map((c) => c.args),
    [ARGS],
  );
  t.equal(ctr.calls[0]?.options?.check, false, "the exit code is read, not thrown");
});

t.test("the view already collected by containerd's garbage collector", async (t) => {
  const stderr =
    'ctr: failed to remove "ebs-cache-record-reads-1": snapshot ebs-cache-record-reads-1 does not exist: not found';
  const ctr = fakeCtr({ exitCode: 1, stdout: "", stderr });
  await t.resolves(removeView(ctr.cli, ARGS, undefined));
});

t.test("any other failure is an error naming the command", async (t) => {
  const ctr = fakeCtr({ exitCode: 1, stdout: "", stderr: "ctr: connection refused\n" });
  const error = await removeView(ctr.cli, ARGS, undefined).catch((e: unknown) => e);
  t.ok(error instanceof AgentError);
  t.match((error as AgentError).message, /ctr snapshots --snapshotter overlayfs rm ebs-cache-record-reads-1 exited 1/);
  t.match((error as AgentError).message, /connection refused$/);
});

t.test("the need list written: never through a link or into a FIFO, never made one the boot refuses", async (t) => {
  const volume = await mkdtemp(join(tmpdir(), "record-reads-"));
  const outside = await mkdtemp(join(tmpdir(), "record-reads-outside-"));
  t.teardown(() => Promise.all([volume, outside].map((dir) => rm(dir, { recursive: true, force: true }))));
  const list = join(volume, ".ebs-cache-agent", READ_LIST_FILE);
  await writeFile(join(outside, "file"), "host");

  await symlink(outside, join(volume, ".ebs-cache-agent"));
  await t.rejects(writeImageReads(volume, "a:1", ["docker/f"]), VolumePathError, "the agent's folder a link");
  t.same(await readdir(outside), ["file"], "nothing written through it");
  await rm(join(volume, ".ebs-cache-agent"));
  await mkdir(join(volume, ".ebs-cache-agent"));
  for (const [what, make] of [
    ["a link", () => symlink(join(outside, "file"), list)],
    ["a FIFO", async () => makeSpecial("a FIFO", list)],
  ] as const) {
    await make();
    await t.rejects(writeImageReads(volume, "a:1", ["docker/f"]), VolumePathError, what);
    t.equal(await readFile(join(outside, "file"), "utf8"), "host", `${what}: its target untouched`);
    await rm(list);
  }

  const others = Array.from({ length: MAX_READ_LIST_FILES - 10 }, (_, i) => `docker/f${i}`);
  await writeImageReads(volume, "a:1", others);
  const before = await readFile(list, "utf8");
  const more = Array.from({ length: 11 }, (_, i) => `docker/g${i}`);
  await t.rejects(writeImageReads(volume, "b:1", more), { name: "AgentError", message: /more than/ });
  t.equal(await readFile(list, "utf8"), before, "past the boot's bound: the list as it was");
  t.same(await readdir(join(volume, ".ebs-cache-agent")), [READ_LIST_FILE], "no temp file left");
});
