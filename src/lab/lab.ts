/**
 * The lab: one EC2 emulator backed by loop-device volumes, and any number of emulated hosts,
 * each with its own IMDS, its own folder standing for its root filesystem, and (on demand) its
 * own private dockerd. Everything lives under one lab root that is reaped on close, or by the
 * janitor if this process dies.
 */
import { randomBytes } from "node:crypto";
import { mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { EC2Client } from "@aws-sdk/client-ec2";
import type { DockerService } from "../agent/ports.ts";
import type { Logger } from "../log.ts";
import { privateDockerdArgs, startPrivateDockerd, type PrivateDockerd } from "./docker/dockerd.ts";
import type { DockerdCommand } from "../docker/dockerd-flags.ts";
import { startEc2Emulator, type Delays, type Ec2Emulator, type Faults } from "./ec2/index.ts";
import { rolePrincipal, type LabRole, type NamedPolicy } from "./ec2/iam/principals.ts";
import { startImdsEmulator, type ImdsEmulator } from "./imds/imds.ts";
import { createHostRoot, hostRootPath } from "./reaper/labdir.ts";
import { openLabRoot, type LabRoot } from "./reaper/labroot.ts";
import { createLoopVolumeBackend, type LoopVolumeBackend } from "./volumes/loopdev.ts";
import { startColdLayer, type ColdLayer, type ColdSnapshotOptions } from "./volumes/cold.ts";
import { byIdDir, sysfsRoot, type LabInstance } from "./types.ts";

/** How to start a lab. */
export interface LabOptions {
  /** Base folder for lab roots (default EBS_CACHE_LAB_BASE or /var/tmp/ebs-cache-lab). */
  base?: string;
  /** Readable part of the lab root's folder name. */
  name?: string;
  region?: string;
  /** EC2 state-machine delays (ms); small defaults keep the lab quick. */
  delays?: Partial<Delays>;
  /** How long after `attached` a volume's device appears on the host. */
  deviceDelayMs?: number;
  faults?: Faults;
  /**
   * Volumes created from a snapshot read slowly on the first touch of each block (see cold.ts
   * and docs/lab.md); off by default.
   */
  coldSnapshots?: ColdSnapshotOptions;
  /** Multiplies the emulated VolumeInitializationRate (default 1). */
  initializationSpeedup?: number;
  /**
   * How far EC2's clock runs ahead of the host's (ms; negative: behind; default 0); changeable with
   * `lab.ec2.setClockOffset()`. The agents' host clock stays real: moving EC2's clock is how a test
   * puts a host's clock days off.
   */
  clockOffsetMs?: number;
  /**
   * Decide each request by the shipped IAM policy of its caller's role (default true): the hosts'
   * instance-profile keys are the agent's role, `credentials(role)` hands out the others, and the
   * lab's own key (LAB_CREDENTIALS, a test's setup) is unrestricted.
   */
  enforceIam?: boolean;
  log?: Logger;
}

/** A key pair the emulator knows the role of. */
export interface LabCredentials {
  accessKeyId: string;
  secretAccessKey: string;
}

/** The files and folders of one emulated host, as the agent is configured to see them. */
export interface LabHostPaths {
  hostRoot: string;
  byIdDir: string;
  sysfsRoot: string;
  /** Where the agent mounts cache volumes. */
  mountRoot: string;
  /** The host's /etc/docker/daemon.json. */
  daemonJson: string;
  /** Docker's default data-root on this host (/var/lib/docker). */
  defaultDataRoot: string;
  /** Folder of the host's private dockerd (socket, exec-root, pidfile, log). */
  dockerdRoot: string;
}

/** A host folder's paths (all but its dockerd's), laid out as a real host's under `hostRoot`. */
export function hostFolderPaths(hostRoot: string): Omit<LabHostPaths, "dockerdRoot"> {
  return {
    hostRoot,
    byIdDir: byIdDir(hostRoot),
    sysfsRoot: sysfsRoot(hostRoot),
    mountRoot: join(hostRoot, "var/lib/ebs-cache"),
    daemonJson: join(hostRoot, "etc/docker/daemon.json"),
    defaultDataRoot: join(hostRoot, "var/lib/docker"),
  };
}

/** Creates a host folder's folders and its daemon.json (docker on its default data-root). */
export async function prepareHostFolder(paths: Omit<LabHostPaths, "dockerdRoot">): Promise<void> {
  for (const dir of [
    paths.byIdDir,
    paths.sysfsRoot,
    paths.mountRoot,
    paths.defaultDataRoot,
    dirname(paths.daemonJson),
  ]) {
    await mkdir(dir, { recursive: true });
  }
  await writeFile(paths.daemonJson, JSON.stringify({ "data-root": paths.defaultDataRoot }, null, 2) + "\n");
}

/** An emulated EC2 host. */
export interface LabHost {
  instance: LabInstance;
  imds: ImdsEmulator;
  paths: LabHostPaths;
  /** The host's dockerd, once started. */
  dockerd?: PrivateDockerd;
  /**
   * Set by whoever links this host to others (the osparc stand-in's swarm): run on each new network namespace of its
   * dockerd, before dockerd starts.
   */
  network?: (netnsFile: string) => Promise<void>;
  /** Starts the host's dockerd (on the data-root its daemon.json names) unless it runs. */
  startDocker(): Promise<PrivateDockerd>;
  /** The host's docker.service, as the agent controls it (start creates the dockerd on first use). */
  dockerService(): DockerService;
  /** `unix://…` of the host's dockerd socket (known before it starts). */
  dockerHost: string;
  /** dockerd's command line on this host, as the agent reads it (systemd's unit on a real host). */
  dockerdCommand(): DockerdCommand;
  /** The host's instance-profile credentials (its IMDS hands out the same): its role's, issued to this instance. */
  credentials: LabCredentials;
}

/** A running lab. */
export interface Lab {
  root: string;
  region: string;
  ec2: Ec2Emulator;
  backend: LoopVolumeBackend;
  /** The cold-snapshot layer, when started with `coldSnapshots`. */
  cold?: ColdLayer;
  hosts: LabHost[];
  /**
   * An SDK client for the emulator, signing with `credentials` (a role's: a host's, or
   * `lab.credentials(role)`), or with the lab's own unrestricted key for a test's setup.
   */
  ec2Client(credentials?: LabCredentials): EC2Client;
  /**
   * Fresh credentials of a role (the shipped policies, or `policies` instead: a test's edited
   * copy), issued to `host`'s instance when given, as an instance profile's are.
   */
  credentials(role: LabRole, options?: { host?: LabHost; policies?: readonly NamedPolicy[] }): LabCredentials;
  /** Adds a running instance (zone `<region>a` unless told) with its IMDS. */
  addHost(options?: AddHostOptions): Promise<LabHost>;
  /**
   * The host of an instance the emulator's RunInstances launched (its zone, tags, type and
   * metadata-tags setting are the launch's): its folder, IMDS and instance-profile credentials.
   */
  adoptHost(instanceId: string, options?: Pick<AddHostOptions, "dockerdArgs" | "role" | "policies">): Promise<LabHost>;
  /** Environment for a process that talks to the lab as the aws CLI would. */
  awsEnv(): Record<string, string>;
  close(): Promise<void>;
}

/** Options for Lab.addHost. */
export interface AddHostOptions {
  availabilityZone?: string;
  tags?: Record<string, string>;
  /** InstanceMetadataTags enabled (default true). */
  metadataTags?: boolean;
  /** More flags for the host's dockerd, as a unit's ExecStart or DOCKER_OPTS would add them. */
  dockerdArgs?: string[];
  /** Its EC2 instance type, as IMDS and DescribeInstances give it (default LAB_INSTANCE_TYPE). */
  instanceType?: string;
  /** The role of its instance profile (default "agent"; the keeper's host: "keeper"). */
  role?: LabRole;
  /** Policies of that role instead of the shipped ones (a test's edited copy). */
  policies?: readonly NamedPolicy[];
}

const DEFAULT_DELAYS: Delays = {
  createMs: 50,
  attachMs: 100,
  detachMs: 100,
  snapshotMs: 100,
  startMs: 100,
  stopMs: 100,
  terminateMs: 100,
};

/**
 * The lab's own key: a test's setup and the demo's tools. The emulator checks no signature and
 * installs no role for it, so it may do anything.
 */
export const LAB_CREDENTIALS = { accessKeyId: "AKIALABLABLABLABLAB0", secretAccessKey: "lab-secret-not-checked" };

function newLabCredentials(): LabCredentials {
  return {
    accessKeyId: `ASIA${randomBytes(8).toString("hex").toUpperCase()}`,
    secretAccessKey: randomBytes(30).toString("base64"),
  };
}

function newInstanceId(): string {
  return `i-${randomBytes(9).toString("hex").slice(0, 17)}`;
}

/** Starts a lab: lab root (with janitor), volume backend, EC2 emulator. */
export async function startLab(options: LabOptions = {}): Promise<Lab> {
  const { log } = options;
  const labRoot: LabRoot = await openLabRoot({ base: options.base, name: options.name ?? "lab", log });
  const root = labRoot.root;
  const region = options.region ?? "us-east-1";
  const hosts: LabHost[] = [];
  const imdsServers: ImdsEmulator[] = [];
  let backend: LoopVolumeBackend | undefined;
  let ec2: Ec2Emulator | undefined;
  let cold: ColdLayer | undefined;
  const clients: EC2Client[] = [];

  const close = async () => {
    // Killed, not stopped, and at once: what a clean stop writes goes with the lab, and a clean stop
    // takes 1.5-2 s, 4-6 s in swarm mode (its ingress network and raft); the hosts share nothing.
    await Promise.all(hosts.flatMap((host) => (host.dockerd ? [host.dockerd.kill().catch(() => undefined)] : [])));
    for (const client of clients) client.destroy();
    await Promise.all(imdsServers.map((server) => server.close().catch(() => undefined)));
    await ec2?.close().catch(() => undefined);
    await backend?.close().catch(() => undefined);
    await cold?.close().catch(() => undefined);
    await labRoot.close();
  };

  try {
    const speedup = options.initializationSpeedup ?? 1;
    if (options.coldSnapshots) {
      cold = await startColdLayer(root, options.coldSnapshots, {
        initializationRate: (volumeId) => ec2?.snapshotState().volumes[volumeId]?.initializationRate,
        speedup,
        log,
      });
    }
    backend = createLoopVolumeBackend({
      root,
      deviceDelayMs: options.deviceDelayMs ?? 50,
      ...(cold ? { layer: cold } : {}),
      log,
    });
    ec2 = await startEc2Emulator({
      backend,
      region,
      stateFile: join(root, "state", "ec2.json"),
      delays: { ...DEFAULT_DELAYS, ...options.delays },
      faults: options.faults,
      ...(options.clockOffsetMs !== undefined ? { clockOffsetMs: options.clockOffsetMs } : {}),
      initializationSpeedup: speedup,
      enforceIam: options.enforceIam ?? true,
      launchedHostRoot: (instanceId) => hostRootPath(root, instanceId),
      log,
    });
  } catch (error) {
    await close();
    throw error;
  }
  const emulator = ec2;
  let dockerdCount = 0;

  const credentials: Lab["credentials"] = (role, { host, policies } = {}) => {
    const issued = newLabCredentials();
    emulator.iam.principals.install(issued.accessKeyId, rolePrincipal(role, host?.instance.instanceId, policies));
    return issued;
  };

  const addHost = (hostOptions: AddHostOptions = {}): Promise<LabHost> =>
    makeHost(newInstanceId(), hostOptions, (hostRoot, instanceId) =>
      emulator.registerInstance({
        instanceId,
        region,
        availabilityZone: hostOptions.availabilityZone ?? `${region}a`,
        tags: { ...hostOptions.tags },
        metadataTags: hostOptions.metadataTags ?? true,
        hostRoot,
        ...(hostOptions.instanceType !== undefined ? { instanceType: hostOptions.instanceType } : {}),
      }),
    );

  const adoptHost: Lab["adoptHost"] = (instanceId, hostOptions = {}) => {
    const launched = emulator.snapshotState().instances[instanceId];
    if (!launched) throw new Error(`no instance ${instanceId} in the EC2 emulator: launch it first (RunInstances)`);
    return makeHost(instanceId, hostOptions, (hostRoot) => {
      // RunInstances named this folder already (launchedHostRoot); the live object is the emulator's.
      const instance = emulator.instances().find((each) => each.instanceId === instanceId);
      if (!instance || instance.hostRoot !== hostRoot) {
        throw new Error(`instance ${instanceId} was not launched by RunInstances in this lab`);
      }
      return instance;
    });
  };

  const makeHost = async (
    instanceId: string,
    hostOptions: Pick<AddHostOptions, "dockerdArgs" | "role" | "policies">,
    register: (hostRoot: string, instanceId: string) => LabInstance,
  ): Promise<LabHost> => {
    const hostRoot = await createHostRoot(root, instanceId);
    // dockerd's socket path must stay under 108 bytes: keep its folder short.
    const dockerdRoot = join(root, "d", String(++dockerdCount));
    const dockerdExtra = hostOptions.dockerdArgs ? { extraArgs: [...hostOptions.dockerdArgs] } : {};
    const paths: LabHostPaths = { ...hostFolderPaths(hostRoot), dockerdRoot };
    await prepareHostFolder(paths);
    await mkdir(dockerdRoot, { recursive: true });
    const instance = register(hostRoot, instanceId);
    // The instance profile's credentials: the role's, issued to this instance.
    const profile = newLabCredentials();
    emulator.iam.principals.install(
      profile.accessKeyId,
      rolePrincipal(hostOptions.role ?? "agent", instanceId, hostOptions.policies),
    );
    const imds = await startImdsEmulator({ instance: () => instance, credentials: profile, log });
    imdsServers.push(imds);
    const host: LabHost = {
      instance,
      imds,
      paths,
      credentials: profile,
      dockerHost: `unix://${join(dockerdRoot, "docker.sock")}`,
      dockerService: () => ({
        start: async () => void (await host.startDocker()),
        stop: async () => void (await host.dockerd?.stop()),
        restart: async () => {
          if (host.dockerd) await host.dockerd.restart();
          else await host.startDocker();
        },
        reload: async () => void (await host.dockerd?.reload()),
        isActive: async () => (host.dockerd ? host.dockerd.isActive() : false),
      }),
      async startDocker() {
        if (host.dockerd && (await host.dockerd.isActive())) return host.dockerd;
        if (host.dockerd) {
          await host.dockerd.start();
          return host.dockerd;
        }
        host.dockerd = await startPrivateDockerd({
          root: dockerdRoot,
          configFile: paths.daemonJson,
          log,
          network: async (netnsFile) => host.network?.(netnsFile),
          ...dockerdExtra,
        });
        return host.dockerd;
      },
      dockerdCommand: () => ({
        source: "the lab's private dockerd",
        args: privateDockerdArgs({ root: dockerdRoot, configFile: paths.daemonJson, ...dockerdExtra }).map((value) => ({
          value,
          origin: "the lab dockerd's command line (addHost dockerdArgs)",
        })),
        problems: [],
      }),
    };
    hosts.push(host);
    return host;
  };

  return {
    root,
    region,
    ec2: emulator,
    backend,
    ...(cold ? { cold } : {}),
    hosts,
    ec2Client(as?: LabCredentials) {
      const client = new EC2Client({
        endpoint: emulator.endpoint,
        region,
        credentials: as ?? LAB_CREDENTIALS,
        maxAttempts: 5,
      });
      clients.push(client);
      return client;
    },
    addHost,
    adoptHost,
    credentials,
    awsEnv() {
      return {
        AWS_ACCESS_KEY_ID: LAB_CREDENTIALS.accessKeyId,
        AWS_SECRET_ACCESS_KEY: LAB_CREDENTIALS.secretAccessKey,
        AWS_DEFAULT_REGION: region,
        AWS_EC2_METADATA_DISABLED: "true",
        AWS_PAGER: "",
      };
    },
    close,
  };
}
