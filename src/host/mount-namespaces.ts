/**
 * Whether a filesystem is still mounted in any mount namespace, not only the agent's. An unmount
 * removes the mount from the agent's namespace alone: a namespace copied after the mount that does
 * not receive unmount propagation (`unshare --mount`, some containers, a service with its own
 * namespace) keeps the filesystem live, and detaching its volume then is a forced detach in effect.
 * Read from /proc/<pid>/mountinfo (one process per distinct /proc/<pid>/ns/mnt) and
 * /sys/fs/<type>/<device> (present while the kernel holds the filesystem mounted anywhere).
 */
import { access, readdir, readFile, readlink, realpath } from "node:fs/promises";
import { basename } from "node:path";
import type { FilesystemLiveness, NamespaceHolder, NamespaceProcess } from "../agent/ports.ts";
import { deviceNumber, parseMountInfo } from "./mount.ts";

/** One mount namespace as /proc shows it: the processes in it and its mount table (mountinfo text). */
export interface NamespaceView {
  /** The namespace's identity (`mnt:[4026531841]`). */
  ns: string;
  processes: NamespaceProcess[];
  mountinfo: string;
}

/** The namespaces whose mount table shows the filesystem of device `majorMinor` (pure). */
export function namespacesHolding(views: NamespaceView[], majorMinor: string): NamespaceHolder[] {
  const holders: NamespaceHolder[] = [];
  for (const view of views) {
    const mountPoints = parseMountInfo(view.mountinfo)
      .filter((entry) => entry.majorMinor === majorMinor)
      .map((entry) => entry.target);
    if (mountPoints.length > 0) holders.push({ ns: view.ns, processes: view.processes, mountPoints });
  }
  return holders;
}

/** A process's command line (its name when it has none, as kernel threads do); undefined once it is gone. */
async function commandOf(pid: number): Promise<string | undefined> {
  const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => undefined);
  const words = cmdline?.split("\0").filter((word) => word !== "") ?? [];
  if (words.length > 0) return words.join(" ").slice(0, 200);
  return (await readFile(`/proc/${pid}/comm`, "utf8").catch(() => undefined))?.trim();
}

/** Every mount namespace of the host's processes, each read once (through its first process). */
export async function readNamespaces(proc = "/proc"): Promise<NamespaceView[]> {
  const pids = (await readdir(proc))
    .filter((name) => /^\d+$/.test(name))
    .map(Number)
    .sort((a, b) => a - b);
  const byNs = new Map<string, NamespaceView>();
  for (const pid of pids) {
    // A process may end at any point here: it is then left out.
    const ns = await readlink(`${proc}/${pid}/ns/mnt`).catch(() => undefined);
    if (ns === undefined) continue;
    const command = await commandOf(pid);
    if (command === undefined) continue;
    const known = byNs.get(ns);
    if (known) {
      known.processes.push({ pid, command });
      continue;
    }
    const mountinfo = await readFile(`${proc}/${pid}/mountinfo`, "utf8").catch(() => undefined);
    if (mountinfo === undefined) continue;
    byNs.set(ns, { ns, processes: [{ pid, command }], mountinfo });
  }
  return [...byNs.values()];
}

/** Whether the kernel still holds the device's filesystem (XFS or ext4) mounted in some namespace. */
async function superblockPresent(device: string): Promise<boolean> {
  const name = basename(await realpath(device).catch(() => device));
  for (const type of ["xfs", "ext4"]) {
    if (
      await access(`/sys/fs/${type}/${name}`).then(
        () => true,
        () => false,
      )
    )
      return true;
  }
  return false;
}

/** Where the filesystem of `device` is still live, across every mount namespace of the host. */
export async function filesystemLiveness(device: string): Promise<FilesystemLiveness> {
  const majorMinor = await deviceNumber(device);
  return {
    holders: namespacesHolding(await readNamespaces(), majorMinor),
    superblock: await superblockPresent(device),
  };
}
