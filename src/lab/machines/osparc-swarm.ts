/**
 * The swarm osparc's machines join: a manager of its own (osparc's autoscaler runs on a manager
 * that is none of the machines it starts) and a network path from each lab host's dockerd to it.
 *
 * Every private dockerd lives in its own network namespace with only its loopback
 * (dockerd.ts); here the manager's namespace gets `10.x.0.1` on its loopback and, per host, a
 * veth pair: `osw<n>` in the manager's namespace (`10.x.<n>.1/24`) and `eth0` in the host's
 * (`10.x.<n>.2/24`, with a route to `10.x.0.0/16` through the manager, which forwards, so
 * workers reach each other's gossip too). `10.x.0.0/16` is the run's own (lab-subnet.ts: free on
 * this machine, held by no other run). A host's namespace goes with its dockerd (a stop, a
 * restart): `link()` makes the path again, as the host's `network` hook, before each start of its
 * dockerd.
 *
 * Only `linkHere` touches the machine's own namespace, for nspawn machines, which share it: a
 * link named after the run's subnet, and the join target then tells the machine's docker to
 * listen on that link's address at a port free now (gossip's 7946 is fixed in docker: the
 * address keeps two runs apart) and to make its `docker_gwbridge` as a bridge named after the run,
 * in the run's subnet, so a run's clean-up removes its own links and never another run's. The
 * swarm's data path (VXLAN) gets a UDP port free now, for the same reason.
 */
import { join } from "node:path";
import { AgentError } from "../../errors.ts";
import { run } from "../../exec.ts";
import { startPrivateDockerd, type PrivateDockerd } from "../docker/dockerd.ts";
import { freeDataPathPort, freeTcpPort, reserveLabSubnet } from "./lab-subnet.ts";

/** At most this many hosts per actor (one /24 each under the run's 10.x.0.0/16; 10.x.255.0/24 is the gateway's). */
const MAX_LINKS = 250;

/** Where a machine that shares the lab machine's namespace (linkHere) has its docker listen and bridge its gateway. */
export interface HereJoin {
  /** `--listen-addr` and `--advertise-addr` of its join: the link's address, a port free when linked. */
  listenAddress: string;
  advertiseAddress: string;
  /** docker_gwbridge made as this Linux bridge, in this subnet, before the join. */
  gatewayBridge: { name: string; subnet: string };
}

export interface OsparcSwarm {
  readonly manager: PrivateDockerd;
  /**
   * `docker swarm join-token worker`'s token and the manager's address; after linkHere, also where
   * the machine's docker listens and bridges its gateway (`here`).
   */
  joinTarget(): Promise<{ token: string; address: string; here?: HereJoin }>;
  /**
   * Makes (again, when the namespace is new) the path from a host's dockerd namespace to the
   * manager; run before that dockerd starts (a joined worker needs it at its start).
   */
  link(key: string, netnsFile: string): Promise<void>;
  /**
   * The same path from the lab machine's own network namespace (an nspawn machine shares it), through
   * an interface named `prefix` and the run's second octet (not `eth0`: the machine has its own);
   * returns its removal, which also removes the gateway bridge the machine's docker made for this run.
   */
  linkHere(prefix: string): Promise<() => Promise<void>>;
  /** Ends the manager (killed: the swarm is the lab's, thrown away with it) and frees its subnet. */
  stop(): Promise<void>;
}

/** Starts the manager (a private dockerd under `root`) and makes it a swarm of its own. */
export async function startOsparcSwarm(root: string): Promise<OsparcSwarm> {
  const subnet = await reserveLabSubnet();
  const { prefix } = subnet;
  const managerAddress = `${prefix}.0.1`;
  let manager: PrivateDockerd | undefined;
  try {
    manager = await startPrivateDockerd({ root: join(root, "m"), configFile: join(root, "m.json") });
  } catch (error) {
    await subnet.release();
    throw error;
  }
  const managerNs = join(manager.root, "net.ns");
  const inNs = (ns: string, args: string[]) => run("nsenter", [`--net=${ns}`, "--", ...args]);
  try {
    await inNs(managerNs, ["ip", "addr", "add", `${managerAddress}/32`, "dev", "lo"]);
    await inNs(managerNs, ["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    await manager.docker([
      "swarm",
      "init",
      "--advertise-addr",
      managerAddress,
      "--listen-addr",
      `${managerAddress}:2377`,
      "--data-path-port",
      String(await freeDataPathPort()),
    ]);
  } catch (error) {
    await manager.stop();
    await subnet.release();
    throw error;
  }
  const indexes = new Map<string, number>();
  let here: HereJoin | undefined;
  const started = manager;
  return {
    manager,
    async joinTarget() {
      const token = (await started.docker(["swarm", "join-token", "-q", "worker"])).stdout.trim();
      return { token, address: `${managerAddress}:2377`, ...(here ? { here } : {}) };
    },
    async link(key, netnsFile) {
      const present = await inNs(netnsFile, ["ip", "-o", "addr", "show", "dev", "eth0"]).catch(() => undefined);
      if (present?.stdout.includes(`${prefix}.`)) return;
      await linkNamespace(key, netnsFile, "eth0");
    },
    async linkHere(devicePrefix) {
      const device = `${devicePrefix}${subnet.octet}`;
      const { peer, address } = await linkNamespace(`here:${device}`, "/proc/self/ns/net", device);
      const gateway = `ebsgw${subnet.octet}`;
      here = {
        listenAddress: `${address}:${await freeTcpPort()}`,
        advertiseAddress: address,
        gatewayBridge: { name: gateway, subnet: `${prefix}.255.0/24` },
      };
      return async () => {
        await inNs(managerNs, ["ip", "link", "del", peer]).catch(() => undefined);
        // Made by the machine's docker at its join, under this run's name: only this run's.
        await run("ip", ["link", "del", gateway], { check: false });
        here = undefined;
      };
    },
    stop: async () => {
      // Killed: nothing of the manager's outlives the lab, and a swarm manager's clean stop takes seconds.
      await started.kill();
      await subnet.release();
    },
  };

  /** A veth pair: `device` in the namespace `netnsFile`, its peer `osw<n>` in the manager's; returns both ends. */
  async function linkNamespace(
    key: string,
    netnsFile: string,
    device: string,
  ): Promise<{ peer: string; address: string }> {
    const managerPid = started.pid;
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
    await inNs(managerNs, ["ip", "addr", "add", `${prefix}.${n}.1/24`, "dev", peer]);
    await inNs(managerNs, ["ip", "link", "set", peer, "up"]);
    await inNs(netnsFile, ["ip", "addr", "add", `${prefix}.${n}.2/24`, "dev", device]);
    await inNs(netnsFile, ["ip", "link", "set", device, "up"]);
    await inNs(netnsFile, ["ip", "route", "add", `${prefix}.0.0/16`, "via", `${prefix}.${n}.1`]);
    return { peer, address: `${prefix}.${n}.2` };
  }
}
