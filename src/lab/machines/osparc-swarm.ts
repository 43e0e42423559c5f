/**
 * The swarm osparc's machines join: a manager of its own (osparc's autoscaler runs on a manager
 * that is none of the machines it starts) and a network path from each lab host's dockerd to it.
 *
 * Every private dockerd lives in its own network namespace with only its loopback
 * (dockerd.ts); here the manager's namespace gets `10.213.0.1` on its loopback and, per host, a
 * veth pair: `osw<n>` in the manager's namespace (`10.213.<n>.1/24`) and `eth0` in the host's
 * (`10.213.<n>.2/24`, with a route to `10.213.0.0/16` through the manager, which forwards, so
 * workers reach each other's gossip too). Nothing is created in the machine's own namespace. A
 * host's namespace goes with its dockerd (a stop, a restart): `link()` makes the path again, as
 * the host's `network` hook, before each start of its dockerd.
 */
import { join } from "node:path";
import { AgentError } from "../../errors.ts";
import { run } from "../../exec.ts";
import { startPrivateDockerd, type PrivateDockerd } from "../docker/dockerd.ts";

const MANAGER_ADDRESS = "10.213.0.1";
/** At most this many hosts per actor (one /24 each under 10.213.0.0/16). */
const MAX_LINKS = 250;

export interface OsparcSwarm {
  readonly manager: PrivateDockerd;
  /** `docker swarm join-token worker`'s token and the manager's address. */
  joinTarget(): Promise<{ token: string; address: string }>;
  /**
   * Makes (again, when the namespace is new) the path from a host's dockerd namespace to the
   * manager; run before that dockerd starts (a joined worker needs it at its start).
   */
  link(key: string, netnsFile: string): Promise<void>;
  /**
   * The same path from the lab machine's own network namespace (an nspawn machine shares it), through
   * the interface `device` (not `eth0`: the machine has its own); returns its removal.
   */
  linkHere(device: string): Promise<() => Promise<void>>;
  stop(): Promise<void>;
}

/** Starts the manager (a private dockerd under `root`) and makes it a swarm of its own. */
export async function startOsparcSwarm(root: string): Promise<OsparcSwarm> {
  const manager = await startPrivateDockerd({ root: join(root, "m"), configFile: join(root, "m.json") });
  const managerNs = join(manager.root, "net.ns");
  const inNs = (ns: string, args: string[]) => run("nsenter", [`--net=${ns}`, "--", ...args]);
  try {
    await inNs(managerNs, ["ip", "addr", "add", `${MANAGER_ADDRESS}/32`, "dev", "lo"]);
    await inNs(managerNs, ["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    await manager.docker([
      "swarm",
      "init",
      "--advertise-addr",
      MANAGER_ADDRESS,
      "--listen-addr",
      `${MANAGER_ADDRESS}:2377`,
    ]);
  } catch (error) {
    await manager.stop();
    throw error;
  }
  const indexes = new Map<string, number>();
  return {
    manager,
    async joinTarget() {
      const token = (await manager.docker(["swarm", "join-token", "-q", "worker"])).stdout.trim();
      return { token, address: `${MANAGER_ADDRESS}:2377` };
    },
    async link(key, netnsFile) {
      const present = await inNs(netnsFile, ["ip", "-o", "addr", "show", "dev", "eth0"]).catch(() => undefined);
      if (present?.stdout.includes("10.213.")) return;
      await linkNamespace(key, netnsFile, "eth0");
    },
    async linkHere(device) {
      const peer = await linkNamespace(`here:${device}`, "/proc/self/ns/net", device);
      return async () => {
        await inNs(managerNs, ["ip", "link", "del", peer]).catch(() => undefined);
      };
    },
    stop: () => manager.stop(),
  };

  /** A veth pair: `device` in the namespace `netnsFile`, its peer `osw<n>` in the manager's; returns the peer. */
  async function linkNamespace(key: string, netnsFile: string, device: string): Promise<string> {
    const managerPid = manager.pid;
    if (managerPid === undefined) throw new AgentError("the swarm manager is not running", "start the swarm again");
    const n = indexes.get(key) ?? indexes.size + 1;
    if (n > MAX_LINKS) throw new AgentError(`more than ${MAX_LINKS} hosts on one lab swarm`, "use fewer hosts");
    indexes.set(key, n);
    const peer = `osw${n}`;
    // A leftover end (its host's namespace was replaced) goes first.
    await inNs(managerNs, ["ip", "link", "del", peer]).catch(() => undefined);
    await inNs(netnsFile, [
      "ip",
      "link",
      "add",
      device,
      "type",
      "veth",
      "peer",
      "name",
      peer,
      "netns",
      String(managerPid),
    ]);
    await inNs(managerNs, ["ip", "addr", "add", `10.213.${n}.1/24`, "dev", peer]);
    await inNs(managerNs, ["ip", "link", "set", peer, "up"]);
    await inNs(netnsFile, ["ip", "addr", "add", `10.213.${n}.2/24`, "dev", device]);
    await inNs(netnsFile, ["ip", "link", "set", device, "up"]);
    await inNs(netnsFile, ["ip", "route", "add", "10.213.0.0/16", "via", `10.213.${n}.1`]);
    return peer;
  }
}
