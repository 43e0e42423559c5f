#!/usr/bin/env node
/**
 * Command-line entry of the agent (the lab has its own: src/lab/main.ts). Errors end here, in
 * src/fatal.ts's handler: an AgentError is logged once with its remediation and mapped to its
 * exit code; anything else is a bug (exit 1, with the stack at debug).
 *
 * Shell conventions hold in every command: a usage error (an unknown option or command, a bad
 * choice or value, a missing argument) exits 2 with the command's usage line, `--help` and
 * `--version` exit 0, and a reader that stops reading (`| head`) ends nothing with a stack trace.
 *
 * A command group named without a subcommand (the program itself, `snapshot`) has been asked for
 * nothing: a usage error, like git's (`git worktree` alone prints its usage on stderr and exits
 * 129, git's usage code), so its help goes to stderr, stdout stays empty, and it exits 2. Docker
 * prints a group's help on stderr too, but exits 0; not followed, since a script that names a group
 * alone did nothing and must not read success. A group with an action of its own runs it, as `git
 * remote` lists the remotes: `pool` alone is the listing (its exit code is the listing's).
 *
 * Only the command asked for is loaded: each command's module (and, through it, the AWS SDK,
 * docker and fio code) is imported when that command runs, so `--help` or `pool` does not parse
 * the code of `boot`. In the bundle each command is a chunk of its own (scripts/build.mjs).
 */
import { Command, CommanderError } from "commander";
import packageJson from "../package.json" with { type: "json" };
import { tolerateClosedOutput } from "./closed-output.ts";
import { ExitCode } from "./errors.ts";
import { reportFatal } from "./fatal.ts";
import { createLogger } from "./log.ts";

/** A command of the CLI: its one-line summary (the top-level listing) and how to build it. */
interface CommandEntry {
  name: string;
  summary: string;
  load: () => Promise<Command>;
  /** Left out of the listing: a builder's step, not a host's. */
  hidden?: boolean;
}

const COMMANDS: CommandEntry[] = [
  {
    name: "boot",
    summary: "claim, attach and mount a cache volume, switch docker's data-root to it, report readiness",
    load: async () => (await import("./cli/boot.ts")).bootCommand(),
  },
  {
    name: "release",
    summary: "give the cache volume back (at shutdown): unmount, detach, tag released-at / expires-at",
    load: async () => (await import("./cli/release.ts")).releaseCommand(),
  },
  {
    name: "prewarm",
    summary: "check or initialize the cache volume restored from a snapshot",
    load: async () => (await import("./cli/prewarm.ts")).prewarmCommand(),
  },
  {
    name: "refresh",
    summary: "pull the images of the pool's current generation (and osparc's pre_pulled_images) the cache volume lacks",
    load: async () => (await import("./cli/refresh.ts")).refreshCommand(),
  },
  {
    name: "status",
    summary:
      "the state of this host (boot, volume, fill, data-root, labels, pre-warm, refresh, release); exit code as " +
      "a health check",
    load: async () => (await import("./cli/status.ts")).statusCommand(),
  },
  {
    name: "gc",
    summary: "delete expired managed volumes (never other volumes or snapshots)",
    load: async () => (await import("./cli/gc.ts")).gcCommand(),
  },
  {
    name: "prune",
    summary:
      "on a pool volume filling up, remove images outside the current generation (never a workspace volume's, " +
      "never one a container uses)",
    load: async () => (await import("./cli/prune.ts")).pruneCommand(),
  },
  {
    name: "pool",
    summary: "list the pool and workspace volumes the agent manages; `pool fill`: keep the pool stocked (the keeper)",
    load: async () => (await import("./cli/pool.ts")).poolCommand(),
  },
  {
    name: "snapshot",
    summary:
      "the pool's golden snapshot without an instance: `snapshot build` a disk image of the image set, " +
      "`snapshot upload` it (EBS direct APIs); `snapshot strip` a volume built by Packer's flow",
    load: async () => (await import("./cli/snapshot.ts")).snapshotCommand(),
  },
  {
    name: "doctor",
    summary: "check every precondition of a boot on this host (IAM by DryRun included), one line each; changes nothing",
    load: async () => (await import("./cli/doctor.ts")).doctorCommand(),
  },
  {
    name: "acceptance",
    summary:
      "measure EBS on this instance (attach, first reads at depths 1/8/32, warm throughput) with volumes it creates " +
      "and deletes; writes a calibration file (needs --yes)",
    load: async () => (await import("./cli/acceptance.ts")).acceptanceCommand(),
  },
  {
    name: "record-reads",
    summary: "at a golden build, record what each image reads at start into the volume's need list",
    load: async () => (await import("./cli/record-reads.ts")).recordReadsCommand(),
    hidden: true,
  },
];

/**
 * The command the arguments name (`boot …`, `help boot`), or undefined (`--help`, no command,
 * an unknown one: commander answers those from the summaries alone).
 */
function requestedCommand(args: readonly string[]): string | undefined {
  const words = args.filter((arg) => !arg.startsWith("-"));
  const name = words[0] === "help" ? words[1] : words[0];
  return COMMANDS.some((entry) => entry.name === name) ? name : undefined;
}

/**
 * Has `command` check its required options after its unknown options and extra arguments, so that
 * `snapshot build --no-such-option` says "unknown option", not that --image is missing: commander
 * checks required options first, and a preAction hook runs after the other two checks. The message
 * and code are commander's own, so a missing one is still a usage error after the usage line.
 */
function checkRequiredOptionsLast(command: Command): void {
  const required = command.options.filter((option) => option.mandatory);
  if (required.length === 0) return;
  for (const option of required) option.makeOptionMandatory(false);
  command.hook("preAction", () => {
    const missing = required.find((option) => command.getOptionValue(option.attributeName()) === undefined);
    if (missing)
      command.error(`error: required option '${missing.flags}' not specified`, {
        code: "commander.missingMandatoryOptionValue",
      });
  });
}

/**
 * A group without an action of its own, named alone, is a usage error: its help on stderr, exit 2
 * (commander prints it so and throws `commander.help` with exit code 1, which would read as a
 * failure; the exit code is set here, the same for every group).
 */
function requireSubcommand(command: Command): void {
  if (command.commands.length === 0) return;
  command.exitOverride((error) => {
    const namedAlone = error.code === "commander.help" && error.exitCode !== 0;
    throw namedAlone ? new CommanderError(ExitCode.usage, error.code, error.message) : error;
  });
}

/**
 * Makes `command` and its subcommands end a usage error by throwing (src/fatal.ts maps it to exit
 * 2) after the usage line, rather than exiting 1 on their own: commander gives a command added
 * with addCommand none of its parent's settings, so each needs them.
 */
function followShellConventions(command: Command, fullName: string): Command {
  command
    .exitOverride()
    .showHelpAfterError(`Usage: ${fullName} ${command.usage()}\n(${fullName} --help lists the options)`);
  requireSubcommand(command);
  checkRequiredOptionsLast(command);
  for (const sub of command.commands) followShellConventions(sub, `${fullName} ${sub.name()}`);
  return command;
}

/** The program with the requested command built for real and the others as listing entries. */
async function buildProgram(args: readonly string[]): Promise<Command> {
  const program = new Command()
    .name("ebs-cache-agent")
    .description("Attach a pre-warmed EBS volume holding Docker's data-root at boot, release it at shutdown")
    .version(packageJson.version, "-V, --version", "print the agent's version");
  const requested = requestedCommand(args);
  for (const entry of COMMANDS) {
    const command = entry.name === requested ? await entry.load() : new Command(entry.name);
    program.addCommand(command.summary(entry.summary), { hidden: entry.hidden ?? false });
  }
  return followShellConventions(program, program.name());
}

// First: `--help | head -1` must not end in a stack trace (src/closed-output.ts).
tolerateClosedOutput("agent");
try {
  const program = await buildProgram(process.argv.slice(2));
  await program.parseAsync(process.argv);
} catch (error) {
  process.exitCode = reportFatal(error, createLogger(), {
    failed: "agent.failed",
    stack: "agent.stack",
    untypedIsBug: true,
  });
}
