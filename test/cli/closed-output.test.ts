/**
 * A reader that stops reading (`… --help | head -1`, `… --json | head`) ends no command with a
 * stack trace: every command's `--help`, a `--json` output and the lab's `--help`, each run as a
 * process whose stdout is a pipe closed before the command starts (so its first write fails with
 * EPIPE, on any machine), exit with the code they have with a reader, and print nothing about it;
 * output that cannot be written for another reason (a full disk) is a failure, said in one line.
 * No root, no lab.
 */
import { spawn } from "node:child_process";
import { mkdtemp, open, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { agentBundle, REPO, withCompileCache } from "../fixtures/lab/agent-bundle.ts";
import { EVERY_COMMAND } from "../fixtures/builders/commands.ts";
import { childEnv } from "../fixtures/lab/lab-prereq.ts";

const CLI = await agentBundle();
/** Every command, the program itself and the hidden one included (listed once: test/fixtures/builders/commands.ts). */
const COMMANDS = EVERY_COMMAND;

interface Ended {
  exitCode: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `file args…` with stdout a pipe: read to its end, or (`closed`) closed before the command
 * starts: a shell waits for a line on stdin, sent once this end of the pipe is closed, then
 * becomes the command.
 */
function runWith(file: string, args: string[], env: NodeJS.ProcessEnv, closed: boolean): Promise<Ended> {
  const child = spawn("sh", ["-c", 'read go && exec "$0" "$@"', file, ...args], { env, cwd: REPO });
  let stdout = "";
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  if (closed) {
    child.stdout.once("close", () => child.stdin.end("go\n"));
    child.stdout.destroy();
  } else {
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stdin.end("go\n");
  }
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (exitCode) => resolve({ exitCode, stdout, stderr }));
  });
}

const env = await withCompileCache(childEnv());

t.test("the program lists no command this test leaves out", async (t) => {
  const help = await runWith(process.execPath, [CLI, "--help"], env, false);
  const listed = [...help.stdout.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!).filter((c) => c !== "help");
  t.ok(listed.length > 5, "commands are listed");
  for (const command of listed)
    t.ok(
      COMMANDS.some((c) => c[0] === command),
      `${command} is covered`,
    );
});

for (const command of COMMANDS) {
  const name = ["ebs-cache-agent", ...command, "--help"].join(" ");
  t.test(`${name} into a closed pipe: exit 0, nothing on stderr`, async (t) => {
    const ended = await runWith(process.execPath, [CLI, ...command, "--help"], env, true);
    t.equal(ended.exitCode, 0, "exit 0, as with a reader");
    t.equal(ended.stderr, "", "no EPIPE, no stack trace");
  });
}

t.test("status --json into a closed pipe: the exit code it has with a reader, nothing on stderr", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "ebs-cache-closed-output-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const config = join(dir, "config.json");
  await writeFile(
    config,
    JSON.stringify({
      region: "us-east-1",
      paths: {
        stateDir: join(dir, "state"),
        mountRoot: join(dir, "mnt"),
        daemonJson: join(dir, "daemon.json"),
        byIdDir: join(dir, "by-id"),
        sysfsRoot: join(dir, "sys"),
      },
      metrics: { textfileDir: null },
    }),
  );
  const args = [CLI, "status", "--json", "--config", config];
  const read = await runWith(process.execPath, args, env, false);
  t.match(JSON.parse(read.stdout), { version: 1, healthy: false }, "with a reader: the document (nothing booted here)");
  const closed = await runWith(process.execPath, args, env, true);
  t.equal(closed.exitCode, read.exitCode, `exit ${read.exitCode}, as with a reader`);
  t.equal(closed.stderr, read.stderr, "stderr as with a reader: no EPIPE, no stack trace");
});

t.test("the lab's --help into a closed pipe: exit 0, nothing on stderr", async (t) => {
  const lab = [process.execPath, join(REPO, "src/lab/main.ts"), "--help"];
  const ended = await runWith(lab[0]!, lab.slice(1), env, true);
  t.equal(ended.exitCode, 0);
  t.equal(ended.stderr, "");
});

t.test("any other failure to write (a full disk: /dev/full) is output lost: exit 1, one line saying so", async (t) => {
  const full = await open("/dev/full", "w");
  t.teardown(() => full.close());
  const child = spawn(process.execPath, [CLI, "--help"], { env, stdio: ["ignore", full.fd, "pipe"] });
  let stderr = "";
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const exitCode = await new Promise<number | null>((resolve) => child.once("close", resolve));
  t.equal(exitCode, 1, "exit 1: the help did not reach its file");
  t.match(stderr, /^<3>agent\.output-lost: could not write to stdout: ENOSPC/);
  t.notMatch(stderr, /\n\s+at /, "no stack trace");
});
