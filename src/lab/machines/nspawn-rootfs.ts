/**
 * The Debian root file systems of the docker engines the lab can run a host on: made once by
 * debootstrap from the machine's Debian mirror, cached outside the repository (keyed by suite
 * and package list), the read-only lower layer of each machine's overlay
 * (src/lab/machines/nspawn.ts). Used by the nspawn boot test, `npm run lab -- --engine`, and
 * bench/boot.ts's engine dimension.
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { access, constants, mkdir, readFile, readdir, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { run } from "../../exec.ts";

/**
 * The checkout this code runs from (the folder holding package.json): from src/lab under tsx,
 * from dist/ in the lab's bundle. The engine machines get Node and the agent's bundle from it.
 */
export const REPO = findRepo(dirname(fileURLToPath(import.meta.url)));

function findRepo(start: string): string {
  for (let dir = start; ; dir = dirname(dir)) {
    if (existsSync(join(dir, "package.json")) && existsSync(join(dir, "scripts", "build.mjs"))) return dir;
    if (dirname(dir) === dir) return join(start, "..", "..");
  }
}

/**
 * A docker engine the boot test runs on: the Debian release that ships it and the packages of
 * its root file system (the cache key is made from the suite and the packages).
 */
export interface EngineRootfs {
  /** The engine's name in test output, e.g. `docker 28`. */
  name: string;
  suite: string;
  packages: readonly string[];
}

export const ROOTFS_VARIANT = "minbase";
/** What the agent needs beside docker and systemd, on every engine. */
const AGENT_PACKAGES = ["xfsprogs", "util-linux", "fio", "ca-certificates", "procps"] as const;

/**
 * The engines tested (docs/operations.md, "Engines tested"): Debian 12's docker.io 20.10, Debian
 * 13's 26.1 and sid's 28.5 with containerd 2.1 (there the client is a package of its own). sid's
 * machine also builds golden volumes of the containerd store (nspawn-golden.lab.test.ts): strace
 * records their need list there, as on Packer's builder.
 */
export const ENGINES = {
  "20.10": {
    name: "docker 20.10 (bookworm)",
    suite: "bookworm",
    packages: ["systemd", "systemd-sysv", "dbus", "docker.io", ...AGENT_PACKAGES],
  },
  "26": {
    name: "docker 26 (trixie)",
    suite: "trixie",
    packages: ["systemd", "systemd-sysv", "dbus", "docker.io", "docker-cli", "containerd", ...AGENT_PACKAGES],
  },
  "28": {
    name: "docker 28 (sid)",
    suite: "sid",
    packages: ["systemd", "systemd-sysv", "dbus", "docker.io", "docker-cli", "containerd", "strace", ...AGENT_PACKAGES],
  },
} as const satisfies Record<string, EngineRootfs>;
export type EngineName = keyof typeof ENGINES;
/** Oldest first (Object.keys would put "26" and "28", integer-like keys, before "20.10"). */
export const ENGINE_NAMES: readonly EngineName[] = ["20.10", "26", "28"];

/** Where built root file systems are kept between runs (outside the repository). */
export const CACHE_BASE = process.env.EBS_CACHE_AGENT_TEST_CACHE ?? "/var/cache/ebs-cache-agent-test";
/** Per-test machines: each an overlay mount of a cached root file system (see nspawn.ts). */
export const MACHINES = join(CACHE_BASE, "machines");
/**
 * Each machine's own writes, by machine name: the overlay's upper and work folders, and the
 * folders bound at /var/lib/docker and /var/lib/containerd. Beside MACHINES, not in it: the
 * reaper takes every folder of MACHINES for a machine.
 */
export const MACHINE_LAYERS = join(CACHE_BASE, "machine-layers");

/** Where the Node binary of the repository's `node` devDependency lives (a real Node 24). */
export const NODE_BINARY = join(REPO, "node_modules", "node", "bin", "node");

const TOOLS = ["debootstrap", "systemd-nspawn", "journalctl", "chroot", "setpriv", "nsenter", "cp", "findmnt"];

/** Whether an executable `tool` is on PATH or in the sbin folders root's PATH has. */
async function onPath(tool: string): Promise<boolean> {
  for (const dir of (process.env.PATH ?? "").split(":").concat(["/usr/sbin", "/sbin", "/usr/bin"])) {
    try {
      await access(join(dir, tool), constants.X_OK);
      return true;
    } catch {
      // not in this folder
    }
  }
  return false;
}

/** What keeps this machine from building and booting an engine's machine (empty: nothing). */
export async function nspawnProblems(): Promise<string[]> {
  const problems: string[] = [];
  if (process.getuid?.() !== 0) problems.push("must run as root (debootstrap, systemd-nspawn, loop devices)");
  for (const tool of TOOLS) {
    if (!(await onPath(tool)))
      problems.push(`${tool} not found (scripts/setup.sh installs debootstrap and systemd-container)`);
  }
  if (!existsSync(NODE_BINARY)) problems.push(`${NODE_BINARY} missing (npm ci installs the node devDependency)`);
  if (!existsSync("/dev/loop-control")) problems.push("/dev/loop-control missing (modprobe loop)");
  return problems;
}

/**
 * The Debian mirror this machine's apt uses for `suite` (deb822 `.sources` and one-line `.list`
 * files); deb.debian.org when none names it.
 */
export async function debianMirror(suite: string): Promise<string> {
  const files = ["/etc/apt/sources.list"];
  try {
    for (const name of (await readdir("/etc/apt/sources.list.d")).sort())
      files.push(join("/etc/apt/sources.list.d", name));
  } catch {
    // no sources.list.d
  }
  for (const file of files) {
    let text: string;
    try {
      text = await readFile(file, "utf8");
    } catch {
      continue;
    }
    if (file.endsWith(".sources")) {
      for (const paragraph of text.split(/\n\s*\n/)) {
        const field = (name: string) =>
          new RegExp(`^${name}:\\s*(.*)$`, "im")
            .exec(
              paragraph
                .split("\n")
                .filter((l) => !l.trimStart().startsWith("#"))
                .join("\n"),
            )?.[1]
            ?.trim()
            .split(/\s+/) ?? [];
        if (field("Types").includes("deb") && field("Suites").includes(suite) && field("Components").includes("main")) {
          const uri = field("URIs")[0];
          if (uri) return uri;
        }
      }
    } else if (file.endsWith(".list")) {
      for (const line of text.split("\n")) {
        const m = /^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s+(.*)$/.exec(line);
        if (m && m[2] === suite && m[3]!.split(/\s+/).includes("main")) return m[1]!;
      }
    }
  }
  return "http://deb.debian.org/debian";
}

/** The cache folder of the engine's root file system for its current package list. */
export function rootfsCacheDir(engine: EngineRootfs): string {
  const key = createHash("sha256")
    .update(JSON.stringify({ suite: engine.suite, variant: ROOTFS_VARIANT, packages: [...engine.packages].sort() }))
    .digest("hex");
  return join(CACHE_BASE, `rootfs-${key.slice(0, 16)}`);
}

export const MARKER = ".ebs-cache-agent-rootfs.json";

/** The suite a cached root file system was built from (its marker), or undefined. */
async function cachedSuite(dir: string): Promise<string | undefined> {
  try {
    const marker = JSON.parse(await readFile(join(dir, MARKER), "utf8")) as { suite?: unknown };
    return typeof marker.suite === "string" ? marker.suite : undefined;
  } catch {
    return undefined;
  }
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * The cached root file system, built first when missing (debootstrap from the machine's own
 * Debian mirror; measured 3 min 10 s for sid and 6 min 44 s for trixie on 2 cores). Returns
 * its folder and whether it was built now.
 */
export async function cachedRootfs(
  engine: EngineRootfs,
  log: (line: string) => void = () => undefined,
): Promise<{ dir: string; built: boolean; ms: number }> {
  const dir = rootfsCacheDir(engine);
  const started = Date.now();
  if (existsSync(join(dir, MARKER))) return { dir, built: false, ms: 0 };
  await mkdir(CACHE_BASE, { recursive: true });
  const lock = `${dir}.lock`;
  // One builder at a time: mkdir is atomic; a lock whose owner died is taken over.
  let waitingFor = 0;
  for (;;) {
    try {
      await mkdir(lock);
      await writeFile(join(lock, "pid"), String(process.pid));
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const owner = Number(await readFile(join(lock, "pid"), "utf8").catch(() => "0"));
      if (owner > 0 && pidAlive(owner)) {
        if (owner !== waitingFor) log(`waiting for process ${owner}, which is building ${dir}`); // once, not every poll
        waitingFor = owner;
        await sleep(2000);
        if (existsSync(join(dir, MARKER))) return { dir, built: false, ms: Date.now() - started };
        continue;
      }
      await rm(lock, { recursive: true, force: true });
    }
  }
  const temp = `${dir}.tmp-${process.pid}`;
  try {
    if (existsSync(join(dir, MARKER))) return { dir, built: false, ms: 0 };
    await rm(temp, { recursive: true, force: true });
    await rm(dir, { recursive: true, force: true }); // an unfinished build
    const mirror = await debianMirror(engine.suite);
    log(
      `building the test root file system of ${engine.name}: debootstrap --variant=${ROOTFS_VARIANT} ` +
        `${engine.suite} from ${mirror} (once; cached in ${dir})`,
    );
    const result = await run(
      "debootstrap",
      [`--variant=${ROOTFS_VARIANT}`, `--include=${engine.packages.join(",")}`, engine.suite, temp, mirror],
      {
        check: false,
        timeoutMs: 20 * 60_000,
        env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" } as Record<string, string>,
      },
    );
    if (result.exitCode !== 0) {
      const tail = (await readFile(join(temp, "debootstrap", "debootstrap.log"), "utf8").catch(() => result.stderr))
        .split("\n")
        .slice(-30)
        .join("\n");
      throw new Error(
        `debootstrap failed (exit ${result.exitCode}) from ${mirror}:\n${result.stderr.slice(-2000)}\n${tail}`,
      );
    }
    // The package cache is 140 MB of .deb files nobody needs again.
    await run("chroot", [temp, "apt-get", "clean"]);
    await writeFile(
      join(temp, MARKER),
      JSON.stringify(
        {
          suite: engine.suite,
          variant: ROOTFS_VARIANT,
          packages: engine.packages,
          mirror,
          builtAt: new Date().toISOString(),
        },
        null,
        2,
      ) + "\n",
    );
    await rename(temp, dir);
    // Root file systems of the same suite with earlier package lists are not used any more
    // (the other engines' are).
    for (const name of await readdir(CACHE_BASE)) {
      if (
        /^rootfs-[0-9a-f]{16}$/.test(name) &&
        join(CACHE_BASE, name) !== dir &&
        (await cachedSuite(join(CACHE_BASE, name))) === engine.suite
      ) {
        log(`removing the outdated ${join(CACHE_BASE, name)}`);
        await rm(join(CACHE_BASE, name), { recursive: true, force: true });
      }
    }
    return { dir, built: true, ms: Date.now() - started };
  } catch (error) {
    await rm(temp, { recursive: true, force: true }).catch(() => undefined);
    throw error;
  } finally {
    await rm(lock, { recursive: true, force: true });
  }
}
