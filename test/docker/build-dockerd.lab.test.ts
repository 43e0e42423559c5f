/**
 * The snapshot build's dockerd leaves nothing under the machine's /run/docker: dockerd makes
 * /run/docker/plugins whatever its exec-root, and the build removes what it made. Run in a
 * private mount namespace with an empty /run, so that the machine's own /run/docker (there or
 * not, another dockerd's or not) neither hides the result nor is touched. Its log, the build's
 * own, also shows its progress line, step by step.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { run } from "../../src/exec.ts";
import { writeImageArchive } from "../../src/lab/docker/images.ts";
import { agentBundle } from "../fixtures/lab/agent-process.ts";
import { assertLabPrerequisites } from "../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

t.test("a build on a machine without /run/docker leaves none", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "build-run-docker-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const archive = join(dir, "a.tar");
  await writeImageArchive(archive, { tag: "lab/a:1", workDir: join(dir, "work") });
  const build = [process.execPath, await agentBundle(), "snapshot", "build", "--image", join(dir, "a.img")];
  const args = ["--size-gib", "1", "--images", "lab/a:1", "--load", archive, "--no-pull", "--no-record-reads"];
  // Its own empty /run: the build's dockerd then starts its own containerd (no system socket).
  const script =
    'mount -t tmpfs ebs-cache-test /run && "$@" >&2 && echo "built" && ' + "find /run/docker 2>/dev/null; echo end";
  const ran = await run(
    "unshare",
    ["--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", ...build, ...args],
    {
      check: false,
      timeoutMs: 300_000,
      env: { PATH: process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin", DOCKER_CONFIG: join(dir, "docker-config") },
    },
  );
  t.equal(ran.exitCode, 0, "the build succeeds", { stderr: ran.stderr.slice(-3000) });
  t.same(ran.stdout.trim().split("\n"), ["built", "end"], "nothing under /run/docker after it, not even the folder");
  // The build's progress line in its log (stderr, not a terminal: no control characters), first step to last.
  const steps = [...ran.stderr.matchAll(/snapshot\.progress: step (\d+) of (\d+), ([a-z-]+)/g)];
  t.match(steps[0]?.slice(1), ["1", /\d+/, "clean-leftovers"], "the first step's progress is logged");
  t.equal(steps.at(-1)?.[1], steps.at(-1)?.[2], "so is the last one's");
  t.notOk(ran.stderr.includes("\r"), "no line is redrawn in a log");
});
