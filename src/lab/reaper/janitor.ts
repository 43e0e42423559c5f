/**
 * The janitor: a detached watchdog process that reaps a lab root when its owner dies, however it
 * dies (SIGKILL included). The owner holds the write end of a pipe to the janitor's stdin; the
 * kernel closes it when the owner exits, which the janitor sees as end-of-file. A normal close
 * writes "bye" first, and the janitor then exits without reaping (the owner already did).
 *
 * How it is started (so a bundled build can do the same):
 *   from sources: `<node> src/lab/reaper/janitor-main.ts <root>` (`<node> --import <tsx loader URL> …` on a
 *   node that does not strip types itself)
 *   from a bundle: `<node> <ebs-cache-lab.mjs> janitor <root>`; src/lab/main.ts routes that to runJanitor().
 */
import { spawn, type ChildProcess } from "node:child_process";
import { openSync, closeSync } from "node:fs";
import type { Socket } from "node:net";
import type { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { describeError } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import { reapLab } from "./cleanup.ts";
import { readLabOwner } from "./labdir.ts";
import { isProcessAlive } from "./procinfo.ts";

/** The line the janitor prints once it watches the pipe; the owner waits for it. */
const READY = "janitor-ready";
/** The line the owner sends on a normal close. */
const BYE = "bye";

/** A command line: program and arguments. */
export interface JanitorCommand {
  file: string;
  args: string[];
}

/**
 * How to run the janitor for `root`: from sources with this node, which strips the types itself
 * (Node 24), or through tsx's loader where it does not (resolved from this module, so the caller's
 * cwd does not matter); or, when this code is bundled, through the lab bundle's CLI. Nothing of
 * the caller's execArgv is passed on: a test runner's instrumentation (tap's --import hooks) must
 * not ride along into a process that outlives the test.
 */
export function janitorCommand(root: string): JanitorCommand {
  const here = import.meta.url;
  if (here.endsWith(".ts")) {
    const entry = fileURLToPath(new URL("./janitor-main.ts", here));
    const loader = process.features.typescript ? [] : ["--import", import.meta.resolve("tsx")];
    return { file: process.execPath, args: [...loader, entry, root] };
  }
  return { file: process.execPath, args: [fileURLToPath(here), "janitor", root] };
}

/** The owner's handle on its janitor. */
export interface JanitorHandle {
  pid: number;
  /** Tells the janitor to exit without reaping and waits (briefly) for it to exit. */
  release(): Promise<void>;
}

/** Options for startJanitor. */
export interface StartJanitorOptions {
  /** Overrides janitorCommand(root) (e.g. a bundle with another CLI layout). */
  command?: JanitorCommand;
  /** File the janitor appends its log lines to (default: env EBS_CACHE_LAB_JANITOR_LOG, else dropped). */
  logFile?: string;
  /** How long to wait for the janitor to report ready (default 30 s). */
  readyTimeoutMs?: number;
}

/**
 * Spawns the janitor for `root` (owned by the calling process), detached in its own session so
 * Ctrl-C or a test runner killing the owner's process group does not take it along, and waits
 * until it is watching. Its stderr never points at the owner's stderr, which may be a pipe that
 * closes with the owner.
 */
export async function startJanitor(root: string, options: StartJanitorOptions = {}): Promise<JanitorHandle> {
  const command = options.command ?? janitorCommand(root);
  const logFile = options.logFile ?? process.env.EBS_CACHE_LAB_JANITOR_LOG;
  const logFd = logFile ? openSync(logFile, "a") : undefined;
  let child: ChildProcess;
  try {
    child = spawn(command.file, command.args, {
      detached: true,
      cwd: "/",
      env: janitorEnv(process.env),
      stdio: ["pipe", "pipe", logFd ?? "ignore"],
    });
  } finally {
    if (logFd !== undefined) closeSync(logFd);
  }
  const stdin = child.stdin as Socket;
  const stdout = child.stdout as Readable;
  stdin.on("error", () => undefined); // EPIPE if the janitor died: nothing more to tell it.
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  await waitForReady(child, stdout, options.readyTimeoutMs ?? 30_000);
  stdout.destroy();
  // Neither the child nor the pipe may keep the owner's event loop alive.
  stdin.unref();
  child.unref();
  const pid = child.pid ?? 0;
  let released: Promise<void> | undefined;
  return {
    pid,
    release: () => {
      released ??= (async () => {
        child.ref(); // Keep the loop alive until it has exited, so the wait below can finish.
        stdin.end(`${BYE}\n`);
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([exited, new Promise<void>((resolve) => (timer = setTimeout(resolve, 5_000)))]);
        clearTimeout(timer);
        child.unref();
      })();
      return released;
    },
  };
}

async function waitForReady(child: ChildProcess, stdout: Readable, timeoutMs: number): Promise<void> {
  let text = "";
  let timer: NodeJS.Timeout | undefined;
  try {
    await new Promise<void>((resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`janitor did not start within ${timeoutMs} ms`)), timeoutMs);
      stdout.on("data", (chunk: Buffer) => {
        text += chunk.toString();
        if (text.includes(READY)) resolve();
      });
      child.once("error", reject);
      child.once("exit", (code, signal) => reject(new Error(`janitor exited before it was ready (${signal ?? code})`)));
    });
  } catch (error) {
    child.kill("SIGKILL");
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

/** The environment without test-runner hooks (NODE_OPTIONS, tap's variables). */
function janitorEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(
    Object.entries(env).filter(
      ([key]) => key !== "NODE_OPTIONS" && !key.startsWith("TAP") && !key.startsWith("_TAPJS"),
    ),
  );
}

/** Options for runJanitor (the janitor process's side). */
export interface RunJanitorOptions {
  /** The pipe from the owner (default: stdin). */
  input?: Readable;
  /** Where "ready" is announced (default: stdout). */
  announce?: (line: string) => void;
  log?: Logger;
  /** How often the owner's liveness is also checked, in case the pipe was inherited (default 2 s). */
  pollMs?: number;
}

/**
 * The janitor process's main: waits until the owner closes the pipe (or is seen dead), then reaps
 * the root, unless the owner said "bye". Resolves with what happened.
 */
export async function runJanitor(
  root: string,
  options: RunJanitorOptions = {},
): Promise<"released" | "reaped" | "failed"> {
  const { log } = options;
  const input = options.input ?? process.stdin;
  const owner = await readLabOwner(root);
  if (!owner) {
    log?.warning("lab.janitor", "no owner record: nothing to watch", { root });
    return "released";
  }
  let bye = false;
  let received = "";
  let poll: NodeJS.Timeout | undefined;
  const ownerGone = new Promise<void>((resolve) => {
    input.on("data", (chunk: Buffer) => {
      received += chunk.toString();
      if (received.split("\n").includes(BYE)) bye = true;
    });
    input.once("end", () => resolve());
    input.once("close", () => resolve());
    input.once("error", () => resolve());
    poll = setInterval(() => {
      void isProcessAlive(owner).then((alive) => {
        if (!alive) resolve();
      });
    }, options.pollMs ?? 2_000);
  });
  (options.announce ?? ((line) => process.stdout.write(`${line}\n`)))(READY);
  log?.info("lab.janitor", "watching lab", { root, owner: owner.pid });
  await ownerGone;
  clearInterval(poll);
  input.destroy();
  if (bye) {
    log?.info("lab.janitor", "owner closed the lab", { root });
    return "released";
  }
  log?.notice("lab.janitor", "owner is gone: reaping", { root, owner: owner.pid });
  for (let attempt = 1; attempt <= 3; attempt++) {
    try {
      const report = await reapLab(root, { log });
      if (!report.skipped) return "reaped";
      log?.info("lab.janitor", "reap skipped", { root, reason: report.skipped });
      if (!report.skipped.startsWith("being reaped")) return "reaped";
    } catch (error) {
      log?.error("lab.janitor", "reap failed", { root, attempt, error: describeError(error) });
    }
    await sleep(2_000 * attempt);
  }
  return "failed";
}
