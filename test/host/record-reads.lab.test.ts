/**
 * The golden build's record of what an image reads at start (src/host/record-reads.ts), on a
 * private dockerd: an image whose command reads two known files, b then a, is run under strace
 * chrooted into its layers; the list names its program, then b, then a, as layer files of the
 * data-root, and the need list written to the volume is one the agent's reader accepts; the
 * builder's command (`record-reads`) does the same.
 */
import t from "tap";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { run } from "../../src/exec.ts";
import { recordImageReads, writeImageReads } from "../../src/host/record-reads.ts";
import { readReadList } from "../../src/host/need-reads.ts";
import { startPrivateDockerd, type PrivateDockerd } from "../../src/lab/docker/dockerd.ts";
import { buildImage } from "../../src/lab/docker/images.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { assertDockerPrerequisites, onPath } from "../fixtures/lab/lab-prereq.ts";

assertDockerPrerequisites("test/host/record-reads.lab.test.ts");
if (!(await onPath("strace"))) throw new Error("strace is missing: run scripts/setup.sh (apt-get install strace)");

const top = await mkdtemp("/var/tmp/ebs-cache-record-");
const volume = join(top, "volume");
const dataRoot = join(volume, "docker");
const configFile = join(top, "daemon.json");
await writeFile(configFile, JSON.stringify({ "data-root": dataRoot }));
const log = createMemoryLogger("debug");
const dockerd: PrivateDockerd = await startPrivateDockerd({ root: join(top, "d"), configFile, log });
t.teardown(async () => {
  await dockerd.stop();
  await rm(top, { recursive: true, force: true });
});
await buildImage(dockerd, {
  tag: "lab/reader:1",
  workDir: join(top, "work"),
  files: { "app/a.txt": "first in the layer\n", "app/b.txt": "read first\n" },
  // Reads b, then a, then b again (kept once); writes a file of its own (no layer holds it).
  cmd: ["/bin/sh", "-c", "cat /app/b.txt /app/a.txt /app/b.txt > /tmp/out; echo done > /tmp/written; cat /tmp/written"],
  log,
});

t.test("the files an image reads at start, first read first, as layer files of the data-root", async (t) => {
  const files = await recordImageReads(dockerd, {
    image: "lab/reader:1",
    volume,
    workDir: join(top, "work"),
    seconds: 30,
    log,
  });
  t.ok(files.length >= 3, `a few files recorded: ${files.join(", ")}`);
  const names = files.map((file) => file.replace(/^docker\/overlay2\/[^/]+\/diff\//, ""));
  for (const file of files) t.match(file, /^docker\/overlay2\/[0-9a-f]+\/diff\//, `${file} is a layer file`);
  t.same(names.slice(0, 3), ["bin/busybox", "app/b.txt", "app/a.txt"], "the program, then b, then a");
  t.equal(new Set(files).size, files.length, "each file once");
  t.notOk(names.includes("tmp/written"), "a file the run wrote is no layer's");
  for (const file of files) await readFile(join(volume, file)); // each names a real file

  await writeImageReads(volume, "lab/reader:1", files, log);
  await writeImageReads(volume, "lab/other:1", ["docker/overlay2/x/diff/y"], log);
  await writeImageReads(volume, "lab/reader:1", files, log);
  const list = await readReadList(volume);
  t.same(
    list?.images.map((entry) => entry.image),
    ["lab/other:1", "lab/reader:1"],
    "the agent's reader accepts the list; a rerun replaces the image's entry, keeping the other's",
  );
  t.same(list?.images[1]?.files, files);
  const stored = JSON.parse(await readFile(join(volume, ".ebs-cache-agent", "reads.json"), "utf8")) as {
    version: number;
    images: Array<{ files: string[] }>;
  };
  t.equal(stored.version, 1, "a list of data-root files only is stored as version 1 (older agents read it)");
  t.equal(`docker/${stored.images[1]?.files[0]}`, files[0], "its paths relative to the data-root");
});

t.test("the builder's command (the Packer step) writes the image's entry", async (t) => {
  await rm(join(volume, ".ebs-cache-agent"), { recursive: true });
  const cli = await run(
    process.execPath,
    ["src/cli.ts", "record-reads", "--volume", volume, "--docker-host", `unix://${dockerd.socket}`, "lab/reader:1"],
    { check: false },
  );
  t.equal(cli.exitCode, 0, cli.stderr);
  const list = await readReadList(volume);
  t.same(
    list?.images[0]?.files.slice(1, 3).map((file) => file.replace(/^docker\/overlay2\/[^/]+\/diff\//, "")),
    ["app/b.txt", "app/a.txt"],
  );
});

t.test("a file a later layer replaced is read from that layer", async (t) => {
  await dockerd.docker([
    "run",
    "--name",
    "upper",
    "--network",
    "none",
    "lab/reader:1",
    "sh",
    "-c",
    "echo new > /app/a.txt",
  ]);
  // The committed image keeps the reader's command (commit would take the container's).
  const cmd = (await dockerd.docker(["image", "inspect", "--format", "{{json .Config.Cmd}}", "lab/reader:1"])).stdout;
  await dockerd.docker(["commit", "--change", `CMD ${cmd}`, "upper", "lab/reader:2"]);
  await dockerd.docker(["rm", "upper"]);
  const files = await recordImageReads(dockerd, { image: "lab/reader:2", volume, workDir: join(top, "work"), log });
  const layerOf = (name: string) => files.find((file) => file.endsWith(`/diff/${name}`))?.split("/")[2];
  t.ok(layerOf("app/a.txt"), `a.txt recorded: ${files.join(", ")}`);
  t.not(layerOf("app/a.txt"), layerOf("app/b.txt"), "a.txt from the upper layer, b.txt from the lower");
  t.equal(
    await readFile(
      join(
        volume,
        files.find((f) => f.endsWith("/app/a.txt"))!,
      ),
      "utf8",
    ),
    "new\n",
  );
});
