/**
 * A private /16 for one run of the lab's swarm (osparc-swarm.ts), free on this machine: no address
 * or route of the machine's network namespace falls in it (`ip -o addr`, `ip route`), and no other
 * run holds it. An nspawn machine shares that namespace, so two runs at once (two test files, a
 * test and a bench) must not pick the same addresses, link names or ports there.
 *
 * A run holds its subnet by a file of its own under RESERVATIONS holding its pid, made whole at
 * once (written aside, then hard-linked into place: link fails when the name exists), so no run
 * ever sees a reservation without its pid. A reservation whose process is gone is taken over: it
 * is renamed away (of runs racing for it, one rename wins) and, if what was renamed turns out to
 * be a live run's (a run that took it over a moment before), linked back. /run is emptied at a
 * reboot, and so are they.
 */
import { link, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { createSocket } from "node:dgram";
import { join } from "node:path";
import { AgentError } from "../../errors.ts";
import { run } from "../../exec.ts";

const RESERVATIONS = "/run/ebs-cache-agent-lab/subnets";
/** The second octets tried, in order (10.200.0.0/16 to 10.254.0.0/16). */
const SECOND_OCTETS = Array.from({ length: 55 }, (_, i) => 200 + i);

export interface LabSubnet {
  /** The first two octets (`10.213`): the run's addresses are `${prefix}.<n>.<m>`. */
  prefix: string;
  /** The second octet: names of the run's links carry it (each unique while the run holds the subnet). */
  octet: number;
  release(): Promise<void>;
}

/** The IPv4 networks the machine's namespace has addresses or routes in, as [first, last] address numbers. */
async function networksInUse(): Promise<Array<[number, number]>> {
  const addr = await run("ip", ["-o", "-4", "addr", "show"]);
  const route = await run("ip", ["-4", "route", "show", "table", "all"]);
  const cidrs = [
    ...[...addr.stdout.matchAll(/\binet (\d+\.\d+\.\d+\.\d+\/\d+)/g)].map((m) => m[1]!),
    ...route.stdout.split("\n").flatMap((line) => {
      const first = line.split(" ").find((word) => /^\d+\.\d+\.\d+\.\d+(\/\d+)?$/.test(word));
      return first ? [first.includes("/") ? first : `${first}/32`] : [];
    }),
  ];
  return cidrs.map((cidr) => {
    const [address, bits] = cidr.split("/") as [string, string];
    const n = address.split(".").reduce((sum, octet) => sum * 256 + Number(octet), 0);
    const size = 2 ** (32 - Number(bits));
    const first = n - (n % size);
    return [first, first + size - 1];
  });
}

/** Whether the process whose pid a reservation holds is still there. */
async function holderAlive(file: string): Promise<boolean> {
  const pid = Number((await readFile(file, "utf8").catch(() => "")).trim());
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Links the whole reservation `mine` at `file`; false when the name is taken. */
const claim = (mine: string, file: string) =>
  link(mine, file).then(
    () => true,
    () => false,
  );

/**
 * Takes `file` over from a run that is gone: renames it away (one racer wins), then puts back what
 * was renamed if a live run held it after all. Whether `file` is free to claim now.
 */
async function takeOverStale(file: string): Promise<boolean> {
  if (await holderAlive(file)) return false;
  const aside = `${file}.stale-${process.pid}-${Math.random().toString(36).slice(2)}`;
  const moved = await rename(file, aside).then(
    () => true,
    () => false,
  );
  if (moved && (await holderAlive(aside))) {
    // Another run took it over between the check and the rename: it is theirs.
    await link(aside, file).catch(() => undefined);
    await rm(aside, { recursive: true, force: true });
    return false;
  }
  await rm(aside, { recursive: true, force: true });
  return true;
}

/** Takes a free 10.x.0.0/16 for this run (`reservations`: the folder all runs share; a test's own). */
export async function reserveLabSubnet(reservations = RESERVATIONS): Promise<LabSubnet> {
  await mkdir(reservations, { recursive: true });
  const inUse = await networksInUse();
  const mine = join(reservations, `.pid-${process.pid}-${Math.random().toString(36).slice(2)}`);
  await writeFile(mine, `${process.pid}\n`);
  try {
    for (const octet of SECOND_OCTETS) {
      const first = (10 * 256 + octet) * 65536;
      if (inUse.some(([lo, hi]) => lo <= first + 65535 && hi >= first)) continue;
      const file = join(reservations, `10.${octet}`);
      const taken = (await claim(mine, file)) || ((await takeOverStale(file)) && (await claim(mine, file)));
      if (!taken) continue;
      return { prefix: `10.${octet}`, octet, release: () => rm(file, { recursive: true, force: true }) };
    }
  } finally {
    await rm(mine, { force: true });
  }
  throw new AgentError(
    "no free 10.x.0.0/16 for the lab's swarm (10.200 to 10.254 are all in use or held by other runs)",
    `remove stale reservations under ${reservations} or free one of those networks`,
  );
}

/** A TCP port free on all addresses of this namespace now (the kernel's choice). */
export function freeTcpPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "0.0.0.0", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * A UDP port free now, within docker's range for a swarm's data path (1024-49151): tried from a
 * random start, so two runs do not try the same ones.
 */
export async function freeDataPathPort(): Promise<number> {
  const start = 20_000 + Math.floor(Math.random() * 20_000);
  for (let port = start; port < start + 200; port++) {
    const free = await new Promise<boolean>((resolve) => {
      const socket = createSocket("udp4");
      socket.once("error", () => resolve(false));
      socket.bind(port, "0.0.0.0", () => socket.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new AgentError("no free UDP port for the swarm's data path", "free a UDP port between 20000 and 40200");
}
