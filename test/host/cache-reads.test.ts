/**
 * The wanted files read through the page cache (cache-reads.ts), on a temp folder standing for the mounted volume:
 * the pages are in memory afterwards (fincore, util-linux), what is not a regular file of the volume is left out
 * without blocking, a stop ends the reads; and the budget's arithmetic.
 */
import t from "tap";
import { mkdir, mkdtemp, rm, stat, symlink, truncate, writeFile } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { execa } from "execa";
import {
  CACHE_SHARE,
  cacheBudget,
  denseEnough,
  filesWithin,
  readThroughCache,
  SPARSE_SLACK_BYTES,
  splitForCache,
} from "../../src/host/cache-reads.ts";
import { parseMemAvailable } from "../../src/host/facts.ts";
import { cachedBytes } from "../fixtures/oracles/page-cache.ts";
import { makeSpecial } from "../fixtures/builders/odd-files.ts";

const MiB = 1024 * 1024;

const volume = async (t: { teardown(fn: () => unknown): void }) => {
  // Under /var/tmp: a tmpfs /tmp keeps every file's pages in memory, and nothing could be dropped.
  const root = await mkdtemp(join("/var/tmp", "cache-reads-"));
  t.teardown(() => rm(root, { recursive: true, force: true }));
  return root;
};

/** Writes `bytes` to `path`, and drops its pages (written back first: dirty pages stay). */
async function coldFile(path: string, bytes: number): Promise<void> {
  await writeFile(path, randomBytes(bytes));
  await execa("sync", [path]);
  await execa("dd", [`if=${path}`, "iflag=nocache", "count=0", "status=none"]);
}

t.test("MemAvailable from /proc/meminfo text; the budget a share of it, 0 when it cannot be told", async (t) => {
  const text = "MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\nBuffers: 1 kB\n";
  t.equal(parseMemAvailable(text), 20000000 * 1024);
  t.equal(parseMemAvailable("MemTotal: 1 kB\n"), undefined, "an old kernel's text without it");
  t.equal(parseMemAvailable("MemAvailable: lots kB\n"), undefined);
  const root = await volume(t);
  await writeFile(join(root, "meminfo"), text);
  t.equal(await cacheBudget(join(root, "meminfo")), Math.floor(20000000 * 1024 * CACHE_SHARE));
  t.equal(await cacheBudget(join(root, "missing")), 0, "unreadable: nothing through the cache");
  t.ok((await cacheBudget()) > 0, "this host's own");
});

t.test("the files within the budget: the first ones whose ranges' bytes add up to no more than it", async (t) => {
  const file = (...sizes: number[]) => ({
    ranges: sizes.map((size, i) => ({ start: i * 1000, end: i * 1000 + size })),
  });
  const files = [file(100, 50), file(300), file(), file(200)];
  t.equal(filesWithin(files, 0), 0);
  t.equal(filesWithin(files, 149), 0);
  t.equal(filesWithin(files, 150), 1);
  t.equal(filesWithin(files, 450), 3, "a file with no ranges of its own (shared blocks) adds nothing");
  t.equal(filesWithin(files, 649), 3);
  t.equal(filesWithin(files, 650), 4);
  t.equal(filesWithin([], 0), 0);
});

t.test(
  "the split: within the budget and dense to the page cache, the rest to fio, each in the list's order",
  async (t) => {
    const file = (name: string, size: number) => ({ name, ranges: [{ start: 0, end: size }] });
    const files = [file("a", 100), file("sparse", 10), file("b", 100), file("c", 100), file("d", 1)];
    const names = (split: { cached: { name: string }[]; byFio: { name: string }[] }) => ({
      cached: split.cached.map((f) => f.name),
      byFio: split.byFio.map((f) => f.name),
    });
    t.same(names(splitForCache(files, filesWithin(files, 210), [true, false, true])), {
      cached: ["a", "b"],
      byFio: ["sparse", "c", "d"],
    });
    t.same(names(splitForCache(files, filesWithin(files, 0), [])), {
      cached: [],
      byFio: ["a", "sparse", "b", "c", "d"],
    });
    t.same(names(splitForCache(files, filesWithin(files, 1e9), [true, true, true, true, true])), {
      cached: ["a", "sparse", "b", "c", "d"],
      byFio: [],
    });
    t.same(
      names(splitForCache(files, filesWithin(files, 1e9), [true])),
      { cached: ["a"], byFio: ["sparse", "b", "c", "d"] },
      "unknown: fio",
    );
  },
);

t.test("the files are read to their end, and their pages are in memory afterwards", async (t) => {
  const root = await volume(t);
  const sizes = [3 * MiB + 123, 1, 0, 2 * MiB, 5 * MiB - 7];
  const paths = sizes.map((_, i) => join(root, `f${i}`));
  for (const [i, path] of paths.entries()) await coldFile(path, sizes[i]!);
  for (const path of paths) t.equal(await cachedBytes(path), 0, "cold before");
  const tally = await readThroughCache(paths, { readers: 2, chunkBytes: MiB, fileSystem: (await stat(root)).dev });
  t.same(tally, { files: 5, skipped: 0, bytes: sizes.reduce((a, b) => a + b, 0) });
  let resident = 0;
  for (const path of paths) resident += await cachedBytes(path);
  // Half at least: a machine busy with other tests reclaims a few pages read once.
  t.ok(resident >= tally.bytes / 2, `${resident} of their ${tally.bytes} bytes in the page cache`);
});

t.test(
  "a sparse file: not dense enough to be read to its end; one read anyway stops at its allocated bytes",
  async (t) => {
    t.ok(denseEnough({ size: 0, blocks: 0 }));
    t.ok(denseEnough({ size: 3 * MiB, blocks: (3 * MiB) / 512 }));
    t.ok(denseEnough({ size: SPARSE_SLACK_BYTES + 4096, blocks: 8 }), "a partly written last block, and some");
    t.notOk(denseEnough({ size: SPARSE_SLACK_BYTES + 4097, blocks: 8 }));
    t.notOk(denseEnough({ size: 64 * 1024 ** 3, blocks: 8 }), "a lastlog of 64 GiB holding 4 KiB");
    const root = await volume(t);
    const path = join(root, "lastlog");
    await writeFile(path, randomBytes(4096));
    await truncate(path, 64 * 1024 ** 3);
    const stats = await stat(path);
    t.notOk(denseEnough(stats), "as stat gives it");
    const tally = await readThroughCache([path], { readers: 1, chunkBytes: MiB, fileSystem: stats.dev });
    t.same(tally, { files: 1, skipped: 0, bytes: stats.blocks * 512 + SPARSE_SLACK_BYTES }, "not its 64 GiB of holes");
  },
);

t.test("a link, a special file, a missing one or another filesystem's: left out, nothing blocks", async (t) => {
  const root = await volume(t);
  const outside = await volume(t);
  await coldFile(join(outside, "secret"), MiB);
  await coldFile(join(root, "plain"), 4096);
  await symlink(join(outside, "secret"), join(root, "link"));
  await mkdir(join(root, "folder"));
  makeSpecial("a FIFO", join(root, "fifo"));
  makeSpecial("a device node", join(root, "device"));
  const paths = ["link", "fifo", "device", "folder", "gone", "plain"].map((name) => join(root, name));
  const tally = await readThroughCache([...paths, "/proc/version"], {
    readers: 3,
    chunkBytes: 64 * 1024,
    fileSystem: (await stat(root)).dev,
  });
  t.same(tally, { files: 1, skipped: 6, bytes: 4096 }, "only the plain file; /proc's is another filesystem's");
  t.equal(await cachedBytes(join(outside, "secret")), 0, "the link's target was not read");
});

t.test("a stop ends the reads: no file begun after it, the reads reject with its reason", async (t) => {
  const root = await volume(t);
  const paths: string[] = [];
  for (let i = 0; i < 8; i++) {
    paths.push(join(root, `f${i}`));
    await coldFile(paths[i]!, MiB);
  }
  const controller = new AbortController();
  const reason = new Error("stopped for the test");
  controller.abort(reason);
  await t.rejects(
    readThroughCache(paths, {
      readers: 2,
      chunkBytes: 4096,
      fileSystem: (await stat(root)).dev,
      signal: controller.signal,
    }),
    reason,
  );
  for (const path of paths) t.equal(await cachedBytes(path), 0, "nothing read");

  // Stopped while the first file is being opened: its reads, and every other file, are never begun.
  const later = new AbortController();
  const reading = readThroughCache(paths, {
    readers: 1,
    chunkBytes: 4096,
    fileSystem: (await stat(root)).dev,
    signal: later.signal,
  });
  later.abort(reason);
  await t.rejects(reading, reason);
  for (const path of paths) t.equal(await cachedBytes(path), 0, "nothing read");
});

t.test("an open that fails otherwise than for a file gone or swapped: the reads fail with it", async (t) => {
  const root = await volume(t);
  // A name over 255 bytes: the walk leaves such an entry out, so here it stands for an error nobody expects.
  const long = join(root, "x".repeat(300));
  await t.rejects(readThroughCache([long], { readers: 1, chunkBytes: 4096, fileSystem: (await stat(root)).dev }), {
    code: "ENAMETOOLONG",
  });
});
