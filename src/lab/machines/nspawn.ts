/**
 * An engine machine: a cached Debian root file system (nspawn-rootfs.ts), under an overlay, given Node
 * and the agent (scripts/install.sh, exactly as the AMI gets them), then booted with
 * `systemd-nspawn -b` and watched from the host through its journal (nspawn-journal.ts). The
 * nspawn boot test, `npm run lab -- --engine` and bench/boot.ts's engines run hosts in these.
 *
 * Each machine has a unique name and a root of its own under the cache's machines/ folder: an
 * overlay mount with the cached root file system below (shared, never written) and the
 * machine's writes above, in machine-layers/<name>/ (a copy of ~600 MB per machine took
 * seconds to make and more to remove). docker's and containerd's state folders are bound from
 * plain folders there too, since neither runs its overlay storage on an overlay mount. A machine
 * whose owner process died is reaped by the next machine prepared.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { copyFile, mkdir, readFile, readdir, rm, stat, symlink, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { run } from "../../exec.ts";
import { readJournal, type JournalEntry } from "./nspawn-journal.ts";
import { MACHINE_LAYERS, MACHINES, MARKER, NODE_BINARY, REPO, pidAlive } from "./nspawn-rootfs.ts";

/** Where the units expect node (systemd/*.service); the AMI installs Node 24 there. */
export const MACHINE_NODE = "/usr/bin/node";

/**
 * Builds the agent's production bundle (scripts/build.mjs, unchanged) into a folder of its own: the
 * script writes `dist/` under its working directory, so it runs in `dir` with `src` linked to
 * the repository's. `npm run build` in the checkout is left alone (other tests rebuild it). The
 * agent only (`--agent-only`): install.sh installs nothing of the lab's bundle, whose build took
 * more than half of the time.
 */
export async function buildBundle(dir: string): Promise<string> {
  await mkdir(dir, { recursive: true });
  if (!existsSync(join(dir, "src"))) await symlink(join(REPO, "src"), join(dir, "src"));
  await run(process.execPath, [join(REPO, "scripts", "build.mjs"), "--agent-only"], { cwd: dir, env: childEnv() });
  return join(dir, "dist", "ebs-cache-agent.mjs");
}

/** The environment for child processes: without a test runner's hooks (tap, tsx's loader). */
export function childEnv(): Record<string, string> {
  return Object.fromEntries(
    Object.entries(process.env).filter(
      (entry): entry is [string, string] =>
        entry[1] !== undefined &&
        entry[0] !== "NODE_OPTIONS" &&
        !entry[0].startsWith("TAP") &&
        !entry[0].startsWith("_TAPJS"),
    ),
  );
}

/** A bind mount from the host into the machine. */
export interface Bind {
  from: string;
  to: string;
  readOnly?: boolean;
}

/** What goes into a machine's root file system. */
export interface MachineSetup {
  rootfs: string;
  bundle: string;
  /** /etc/ebs-cache-agent/config.json of the machine. */
  config: Record<string, unknown>;
  /** /etc/docker/daemon.json of the machine before the agent edits it. */
  daemonJson: Record<string, unknown>;
  /**
   * Block device nodes to create in the machine's /dev before the agent starts (see
   * deviceNodesUnit). nspawn gives the container a /dev of its own with no udev: devices the
   * host creates after the container started never show up in it.
   */
  blockDevices: Array<{ name: string; major: number; minor: number }>;
  /**
   * Drop-ins for the installed units, unit name -> the drop-in's text (written as
   * /etc/systemd/system/<unit>.d/50-test.conf), e.g. to make a unit fail on purpose.
   */
  dropIns?: Record<string, string>;
  /** More files of the machine (path inside it -> text), e.g. a unit of the test's own. */
  files?: Record<string, { text: string; mode?: number }>;
  /** Units enabled as multi-user.target wants them (their files given in `files`). */
  wants?: string[];
}

/** The output of install.sh into the machine. */
export interface PreparedMachine {
  dir: string;
  name: string;
  installLog: string;
}

/** The process that made the machine in `dir` (its `.owner` file), or 0 when it names none. */
export async function machineOwner(dir: string): Promise<number> {
  return Number(await readFile(join(dir, ".owner"), "utf8").catch(() => "0")) || 0;
}

/** Removes machines left by processes (tests, demos, benches) that died. */
async function reapStaleMachines(): Promise<void> {
  const names = await readdir(MACHINES).catch((): string[] => []);
  for (const name of names) {
    const dir = join(MACHINES, name);
    const owner = await machineOwner(dir);
    if (owner > 0 && pidAlive(owner)) continue;
    const running = await run("pgrep", ["-f", `systemd-nspawn .*--directory=${dir}( |$)`], { check: false });
    if (running.exitCode === 0) continue;
    await removeMachine(dir, name);
  }
  // Layers whose machine folder is gone (a removal cut short).
  for (const name of await readdir(MACHINE_LAYERS).catch((): string[] => [])) {
    if (!names.includes(name) && !existsSync(join(MACHINES, name)))
      await rm(join(MACHINE_LAYERS, name), { recursive: true, force: true }).catch(() => undefined);
  }
}

/** Unmounts a machine's root and removes it and its layers; the machine must not run. */
async function removeMachine(dir: string, name: string): Promise<void> {
  // Unmounted first: removing through the mount would only write whiteouts over the shared root.
  if ((await run("mountpoint", ["-q", dir], { check: false })).exitCode === 0) {
    const unmounted = await run("umount", [dir], { check: false });
    if (unmounted.exitCode !== 0) await run("umount", ["--lazy", dir], { check: false });
  }
  await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  await rm(join(MACHINE_LAYERS, name), { recursive: true, force: true }).catch(() => undefined);
  await rm(join("/run/systemd/nspawn/propagate", name), { recursive: true, force: true }).catch(() => undefined);
}

/** The folders bound at docker's and containerd's state folders of the machine (see the file's comment). */
function stateBinds(name: string): Bind[] {
  return [
    { from: join(MACHINE_LAYERS, name, "docker"), to: "/var/lib/docker" },
    { from: join(MACHINE_LAYERS, name, "containerd"), to: "/var/lib/containerd" },
  ];
}

/**
 * The harness's list of device nodes in the machine: a tmpfiles.d(5) file, which one
 * systemd-tmpfiles applies in one process (a shell's mknod per node, 512 of them, took 2 s of
 * every boot, before sysinit.target).
 */
const DEVICE_LIST = "/usr/local/lib/ebs-cache-lab/block-devices.conf";

/**
 * The lab's own one-shot unit (not the product's): creates the block device nodes the
 * lab's volumes will use, before the agent looks for them. A node for a loop device the host
 * has not set up yet is harmless: until then it is only a (major, minor) pair.
 */
export function deviceNodesUnit(): string {
  return [
    "# ebs-cache lab (src/lab/machines/nspawn.ts): the lab's loop devices inside the nspawn container.",
    "[Unit]",
    "Description=ebs-cache lab: block device nodes of the lab's volumes",
    "DefaultDependencies=no",
    "Before=ebs-cache-agent.service sysinit.target",
    "",
    "[Service]",
    "Type=oneshot",
    "RemainAfterExit=yes",
    `ExecStart=/usr/bin/systemd-tmpfiles --create ${DEVICE_LIST}`,
    "",
    "[Install]",
    "WantedBy=sysinit.target",
    "",
  ].join("\n");
}

/** The list the unit applies: one `b` line per device node (made when missing, mode 0660, root's). */
export function deviceNodesList(devices: MachineSetup["blockDevices"]): string {
  return [
    "# ebs-cache lab (src/lab/machines/nspawn.ts): the lab's loop devices inside the nspawn container.",
    ...devices.map((d) => `b /dev/${d.name} 0660 - - - ${d.major}:${d.minor}`),
    "",
  ].join("\n");
}

/**
 * Mounts the cached root file system under an overlay of the machine's own and installs Node, the agent, its config and
 * the harness.
 */
export async function prepareMachine(setup: MachineSetup): Promise<PreparedMachine> {
  await reapStaleMachines();
  await mkdir(MACHINES, { recursive: true });
  const name = `ebs-nspawn-${randomBytes(4).toString("hex")}`;
  const dir = join(MACHINES, name);
  try {
    return await fillMachine(setup, dir, name);
  } catch (error) {
    await removeMachine(dir, name);
    throw error;
  }
}

async function fillMachine(setup: MachineSetup, dir: string, name: string): Promise<PreparedMachine> {
  await mkdir(dir);
  const layers = join(MACHINE_LAYERS, name);
  for (const folder of ["upper", "work", "docker", "containerd"])
    await mkdir(join(layers, folder), { recursive: true });
  // The owner is known from the mount's first moment on (the reaper reads it).
  await writeFile(join(layers, "upper", ".owner"), String(process.pid));
  await run("mount", [
    "-t",
    "overlay",
    "overlay",
    "-o",
    `lowerdir=${setup.rootfs},upperdir=${join(layers, "upper")},workdir=${join(layers, "work")}`,
    dir,
  ]);
  await rm(join(dir, MARKER), { force: true });
  await copyFile(NODE_BINARY, join(dir, MACHINE_NODE));
  await run("chmod", ["0755", join(dir, MACHINE_NODE)]);
  const install = await run("bash", [join(REPO, "scripts", "install.sh"), "--bundle", setup.bundle, dir], {
    check: false,
    env: childEnv(),
  });
  if (install.exitCode !== 0)
    throw new Error(`scripts/install.sh failed (${install.exitCode}): ${install.stderr}${install.stdout}`);
  await writeFile(join(dir, "etc/ebs-cache-agent/config.json"), JSON.stringify(setup.config, null, 2) + "\n");
  await mkdir(join(dir, "etc/docker"), { recursive: true });
  await writeFile(join(dir, "etc/docker/daemon.json"), JSON.stringify(setup.daemonJson, null, 2) + "\n");
  const unit = "ebs-cache-lab-devices.service";
  await mkdir(join(dir, dirname(DEVICE_LIST)), { recursive: true });
  await writeFile(join(dir, DEVICE_LIST), deviceNodesList(setup.blockDevices));
  await writeFile(join(dir, "etc/systemd/system", unit), deviceNodesUnit());
  await mkdir(join(dir, "etc/systemd/system/sysinit.target.wants"), { recursive: true });
  await symlink(`/etc/systemd/system/${unit}`, join(dir, "etc/systemd/system/sysinit.target.wants", unit));
  for (const [path, file] of Object.entries(setup.files ?? {})) {
    await mkdir(join(dir, dirname(path)), { recursive: true });
    await writeFile(join(dir, path), file.text, { mode: file.mode ?? 0o644 });
  }
  for (const wanted of setup.wants ?? []) {
    await mkdir(join(dir, "etc/systemd/system/multi-user.target.wants"), { recursive: true });
    await symlink(`/etc/systemd/system/${wanted}`, join(dir, "etc/systemd/system/multi-user.target.wants", wanted));
  }
  for (const [target, text] of Object.entries(setup.dropIns ?? {})) {
    await mkdir(join(dir, "etc/systemd/system", `${target}.d`), { recursive: true });
    await writeFile(join(dir, "etc/systemd/system", `${target}.d`, "50-test.conf"), text);
  }
  return { dir, name, installLog: install.stdout + install.stderr };
}

/** A booted machine. */
export interface Machine {
  dir: string;
  name: string;
  /** PID (on the host) of the machine's systemd in its current boot (a reboot gives a new one). */
  readonly pid1: number;
  /** Console output so far, of every boot. */
  console(): string;
  journal(): Promise<JournalEntry[]>;
  /** Polls the journal until `check` finds what it wants; returns it, or throws at the deadline. */
  waitForJournal<T>(check: (entries: JournalEntry[]) => T | undefined, timeoutMs: number, what: string): Promise<T>;
  /** Runs a program inside the machine (all its namespaces), e.g. systemctl. */
  exec(args: string[], timeoutMs?: number): Promise<{ exitCode: number; stdout: string; stderr: string }>;
  /**
   * The boot id of the machine's current boot, as its journal writes it (`_BOOT_ID`: 32 hex
   * digits, no dashes). nspawn gives each boot of the container a new one.
   */
  bootId(): Promise<string>;
  /**
   * Reboots the machine: runs `command` inside (e.g. `systemctl reboot`), waits for nspawn to
   * exit with 133 (its exit status when the container's systemd rebooted) and starts nspawn
   * again on the same root with the same binds, as the kernel would boot the same disk again.
   * What the host holds for the machine (the lab's loop devices, the emulator's attachments)
   * stays, as an EBS volume stays attached over an instance's reboot. Returns when the new
   * boot's systemd runs.
   */
  reboot(command: string[], timeoutMs: number): Promise<void>;
  /** Asks systemd for a clean poweroff (SIGRTMIN+4 to its PID 1) and waits for nspawn to exit. */
  poweroff(timeoutMs: number): Promise<number | null>;
  /** Whether nspawn still runs. */
  running(): boolean;
  /**
   * Kills whatever is left (the container's PID 1 first, which ends its PID namespace) and removes the machine's root.
   */
  destroy(): Promise<void>;
}

/** PATH of commands run in a machine (a Debian root's). */
const MACHINE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** SIGRTMIN+4 as systemd sees it (glibc's SIGRTMIN is 34): "power off". */
const SIGRTMIN_PLUS_4 = 34 + 4;

/** systemd-nspawn's exit status when the container rebooted (systemd-nspawn(1), "Exit status"). */
export const NSPAWN_REBOOTED = 133;

/** One run of systemd-nspawn: one boot of the machine. */
interface Boot {
  child: ChildProcess;
  /** Resolves with nspawn's exit code (null: killed by a signal, or it could not start). */
  exited: Promise<number | null>;
  running(): boolean;
  exitCode(): number | null | undefined;
  /** PID (on the host) of the container's systemd; 0 when it never started. */
  pid1: number;
}

/**
 * Boots the prepared machine: `systemd-nspawn -b` with the host's network (so it reaches the
 * lab's emulators on 127.0.0.1), every capability and the system calls docker needs, the
 * given bind mounts, and its console captured, on the unified cgroup hierarchy. nspawn runs under `setpriv --pdeathsig
 * TERM`:
 * if the process that booted it dies, nspawn shuts the container down.
 */
export async function bootMachine(prepared: PreparedMachine, binds: Bind[]): Promise<Machine> {
  const { dir, name } = prepared;
  const args = [
    "--pdeathsig",
    "TERM",
    "--",
    "systemd-nspawn",
    "--quiet",
    "--keep-unit",
    "--register=no",
    "--boot",
    `--directory=${dir}`,
    `--machine=${name}`,
    "--capability=all",
    "--system-call-filter=@mount @system-service keyctl bpf",
    "--console=read-only",
    ...[...stateBinds(name), ...binds].map((b) => `--${b.readOnly ? "bind-ro" : "bind"}=${b.from}:${b.to}`),
  ];
  let consoleText = "";
  const append = (chunk: Buffer) => {
    consoleText += chunk.toString("utf8");
    if (consoleText.length > 2_000_000) consoleText = consoleText.slice(-1_000_000);
  };
  // The unified cgroup hierarchy: the test hosts mount cgroup v1 with v2 beside it; on v1 the
  // container's cgroup tree is read-only (runc cannot create a container's cgroup) and systemd
  // 257+ refuses to boot at all. EC2's Debian 12 and 13 boot on v2 too.
  const env = { ...childEnv(), SYSTEMD_NSPAWN_UNIFIED_HIERARCHY: "1" };

  const launch = async (): Promise<Boot> => {
    const child: ChildProcess = spawn("setpriv", args, { stdio: ["ignore", "pipe", "pipe"], env });
    child.stdout?.on("data", append);
    child.stderr?.on("data", append);
    let exitCode: number | null | undefined;
    const exited = new Promise<number | null>((resolve) => {
      child.on("exit", (code) => {
        exitCode = code;
        resolve(code);
      });
      child.on("error", (error) => {
        append(Buffer.from(`\nspawn failed: ${String(error)}\n`));
        exitCode = null;
        resolve(null);
      });
    });
    const running = () => exitCode === undefined;
    // The container's PID 1 is nspawn's child.
    const nspawnPid = child.pid;
    let pid1 = 0;
    const deadline = Date.now() + 30_000;
    while (nspawnPid !== undefined && running() && Date.now() < deadline) {
      const children = await readFile(`/proc/${nspawnPid}/task/${nspawnPid}/children`, "utf8").catch(() => "");
      const candidate = Number(children.trim().split(/\s+/)[0] ?? 0);
      if (candidate > 0) {
        const comm = await readFile(`/proc/${candidate}/comm`, "utf8").catch(() => "");
        if (comm.trim() === "systemd") {
          pid1 = candidate;
          break;
        }
      }
      await sleep(50);
    }
    return { child, exited, running, exitCode: () => exitCode, pid1 };
  };

  let current = await launch();

  const stop = async (boot: Boot) => {
    if (!boot.running()) return;
    if (boot.pid1 > 0) {
      try {
        process.kill(boot.pid1, "SIGKILL");
      } catch {
        // already gone
      }
    }
    await Promise.race([boot.exited, sleep(10_000, undefined, { ref: false })]);
    if (boot.running() && boot.child.pid !== undefined) {
      try {
        process.kill(boot.child.pid, "SIGKILL");
      } catch {
        // already gone
      }
      await Promise.race([boot.exited, sleep(10_000, undefined, { ref: false })]);
    }
  };
  const destroy = async () => {
    await stop(current);
    await removeMachine(dir, name);
  };
  const notStarted = () =>
    new Error(`systemd-nspawn did not start the container's systemd within 30 s:\n${consoleText.slice(-4000)}`);

  if (current.pid1 === 0) {
    await destroy();
    throw notStarted();
  }

  const exec: Machine["exec"] = async (command, timeoutMs = 120_000) =>
    // `env -i`: the command sees the machine's PATH only, none of this process's environment
    // (a test runner's NODE_OPTIONS would make the machine's node load modules it lacks).
    run(
      "nsenter",
      [
        "--target",
        String(current.pid1),
        "--mount",
        "--uts",
        "--ipc",
        "--pid",
        "--",
        "env",
        "-i",
        `PATH=${MACHINE_PATH}`,
        ...command,
      ],
      {
        check: false,
        timeoutMs,
        env: { PATH: MACHINE_PATH },
      },
    );

  const machine: Machine = {
    dir,
    name,
    get pid1() {
      return current.pid1;
    },
    console: () => consoleText,
    journal: () => readJournal(dir),
    async waitForJournal(check, timeoutMs, what) {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const found = check(await readJournal(dir));
        if (found !== undefined) return found;
        if (!current.running())
          throw new Error(`the machine stopped while waiting for ${what}:\n${consoleText.slice(-4000)}`);
        if (Date.now() > until) throw new Error(`no ${what} within ${timeoutMs / 1000} s`);
        await sleep(500);
      }
    },
    exec,
    async bootId() {
      const out = await exec(["cat", "/proc/sys/kernel/random/boot_id"], 30_000);
      const id = out.stdout.trim().replace(/-/g, "");
      if (out.exitCode !== 0 || !/^[0-9a-f]{32}$/.test(id))
        throw new Error(`no boot id from the machine (exit ${out.exitCode}): ${out.stderr}${out.stdout}`);
      return id;
    },
    async reboot(command, timeoutMs) {
      if (!current.running()) throw new Error(`${name} does not run: nothing to reboot`);
      const until = Date.now() + timeoutMs;
      const asked = await exec(command, timeoutMs);
      // The command may be killed by the shutdown it started: its exit status says nothing.
      const code = await Promise.race([
        current.exited,
        sleep(Math.max(0, until - Date.now()), undefined, { ref: false }).then(() => "timeout" as const),
      ]);
      if (code === "timeout")
        throw new Error(
          `${name} did not reboot within ${timeoutMs / 1000} s after ${command.join(" ")} (exit ` +
            `${asked.exitCode}: ${asked.stderr}):\n${consoleText.slice(-4000)}`,
        );
      if (code !== NSPAWN_REBOOTED)
        throw new Error(
          `systemd-nspawn exited ${code} after ${command.join(" ")}, not ${NSPAWN_REBOOTED} (a ` +
            `reboot):\n${consoleText.slice(-4000)}`,
        );
      append(
        Buffer.from(`\n[lab] ${name}: the machine rebooted (nspawn exited ${NSPAWN_REBOOTED}); booting it again\n`),
      );
      current = await launch();
      if (current.pid1 === 0) throw notStarted();
    },
    async poweroff(timeoutMs) {
      if (!current.running()) return current.exitCode() ?? null;
      process.kill(current.pid1, SIGRTMIN_PLUS_4);
      const code = await Promise.race([
        current.exited,
        sleep(timeoutMs, undefined, { ref: false }).then(() => "timeout" as const),
      ]);
      if (code === "timeout")
        throw new Error(`the machine did not power off within ${timeoutMs / 1000} s:\n${consoleText.slice(-4000)}`);
      return code;
    },
    running: () => current.running(),
    destroy,
  };
  return machine;
}

/** Mounts in the machine's mount namespace (its /proc/<pid1>/mountinfo). */
export async function machineMounts(
  pid1: number,
): Promise<Array<{ target: string; source: string; fsType: string; options: string }>> {
  const text = await readFile(`/proc/${pid1}/mountinfo`, "utf8");
  const unescape = (s: string) => s.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
  return text
    .split("\n")
    .filter(Boolean)
    .map((line) => {
      const [left, right] = line.split(" - ");
      const parts = (left ?? "").split(" ");
      const [fsType, source] = (right ?? "").split(" ");
      return {
        target: unescape(parts[4] ?? ""),
        options: parts[5] ?? "",
        source: unescape(source ?? ""),
        fsType: fsType ?? "",
      };
    });
}

/**
 * Nodes for loop0…loopN: 256 beyond the highest loop device the host has now (at least 512),
 * so the one the lab sets up for the machine's volume is among them. Major 7; the minor of
 * loopN is N shifted by the loop driver's max_part.
 */
export async function loopDeviceNumbers(): Promise<MachineSetup["blockDevices"]> {
  const maxPart = Number((await readFile("/sys/module/loop/parameters/max_part", "utf8").catch(() => "0")).trim()) || 0;
  const shift = maxPart > 0 ? Math.floor(Math.log2(maxPart)) + 1 : 0;
  const control = await stat("/dev/loop-control").catch(() => undefined);
  if (!control) throw new Error("/dev/loop-control missing");
  const highest = Math.max(
    -1,
    ...(await readdir("/sys/block"))
      .map((name) => /^loop(\d+)$/.exec(name)?.[1])
      .filter((n) => n !== undefined)
      .map(Number),
  );
  const count = Math.max(512, highest + 257);
  return Array.from({ length: count }, (_, n) => ({ name: `loop${n}`, major: 7, minor: n << shift }));
}
