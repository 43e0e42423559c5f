/**
 * Running the agent on a lab host: the same wiring as on EC2 (src/cli/wiring.ts), pointed at
 * the host's folders, its IMDS, the lab's EC2 emulator and the host's private dockerd.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { AcceptanceDeps } from "../../agent/acceptance/deps.ts";
import { wireAcceptance } from "../../agent/acceptance/wire.ts";
import type { PrewarmFromMount } from "../../agent/ports.ts";
import { runBoot, type BootOutcome } from "../../agent/boot/run.ts";
import { runPrewarm, type PrewarmCommandOptions, type PrewarmOutcome } from "../../agent/prewarm/run.ts";
import { runRelease, type ReleaseOutcome } from "../../agent/release/run.ts";
import { runRefresh, type RefreshOutcome } from "../../agent/refresh/run.ts";
import { wireAdapters, type WiringOptions } from "../../cli/wiring.ts";
import { createMetadataService } from "../../aws/imds.ts";
import { validateConfig, type AgentConfig } from "../../config/index.ts";
import { AgentError } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import type { Lab, LabHost, LabHostPaths } from "../lab.ts";
import { deepMerge } from "./deep-merge.ts";

/** Config keys a test or the demo may set on top of the lab's (a raw config.json object). */
export type ConfigOverrides = Record<string, unknown>;

/** The config.json a lab host's agent runs with: the host's paths and the lab's endpoints. */
export function labConfigJson(lab: Lab, host: LabHost, overrides: ConfigOverrides = {}): Record<string, unknown> {
  return agentConfigJson(
    {
      region: lab.region,
      ec2Endpoint: lab.ec2.endpoint,
      imdsEndpoint: host.imds.endpoint,
      paths: host.paths,
      dockerHost: host.dockerHost,
    },
    overrides,
  );
}

/** What an agent's config points at: an EC2 endpoint, an IMDS, and a host folder (hostFolderPaths). */
export interface AgentTarget {
  region: string;
  ec2Endpoint: string;
  imdsEndpoint: string;
  paths: Pick<LabHostPaths, "hostRoot" | "byIdDir" | "sysfsRoot" | "mountRoot" | "daemonJson">;
  dockerHost: string;
}

/** The config.json of an agent pointed at `target`: every path it writes under the host folder. */
export function agentConfigJson(target: AgentTarget, overrides: ConfigOverrides = {}): Record<string, unknown> {
  const { paths } = target;
  const base: Record<string, unknown> = {
    region: target.region,
    ec2Endpoint: target.ec2Endpoint,
    imdsEndpoint: target.imdsEndpoint,
    timeouts: { imdsSeconds: 30, attachSeconds: 60, deviceSeconds: 30, dockerSeconds: 120 },
    paths: {
      byIdDir: paths.byIdDir,
      sysfsRoot: paths.sysfsRoot,
      mountRoot: paths.mountRoot,
      daemonJson: paths.daemonJson,
      containerdConfig: join(paths.hostRoot, "etc/containerd/config.toml"),
      dockerHost: target.dockerHost,
      stateDir: join(paths.hostRoot, "var/lib/ebs-cache-agent"),
      // The host folder's own: systemd does not run it, so the host's docker unit is never read.
      unitsDir: join(paths.hostRoot, "etc/systemd/system"),
      systemdRunDir: join(paths.hostRoot, "run/systemd/system"),
    },
    // Never the host's node_exporter folder: the host's own, in its root.
    metrics: { textfileDir: join(paths.hostRoot, "var/lib/prometheus/node-exporter") },
  };
  return deepMerge(base, overrides);
}

/** Validates the lab config; a problem here is a bug in the caller. */
export function labConfig(lab: Lab, host: LabHost, overrides: ConfigOverrides = {}): AgentConfig {
  const { config, problems } = validateConfig(labConfigJson(lab, host, overrides));
  if (problems.length > 0) throw new AgentError(`lab config: ${problems.join("; ")}`, "fix the overrides");
  return config;
}

/** Writes the host's /etc/ebs-cache-agent/config.json (for running the CLI as a process) and returns its path. */
export async function writeLabConfig(lab: Lab, host: LabHost, overrides: ConfigOverrides = {}): Promise<string> {
  const path = join(host.paths.hostRoot, "etc/ebs-cache-agent/config.json");
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, JSON.stringify(labConfigJson(lab, host, overrides), null, 2) + "\n");
  return path;
}

/** How the agent is wired on a lab host: the lab's EC2, the host's IMDS and dockerd. */
function labWiring(
  lab: Lab,
  host: LabHost,
  options: {
    overrides?: ConfigOverrides;
    log: Logger;
    startPrewarm?: () => Promise<void>;
    prewarmFromMount?: PrewarmFromMount;
    startRefresh?: () => Promise<void>;
    fio?: string;
    rebootQueued?: boolean;
  },
): WiringOptions {
  const config = labConfig(lab, host, options.overrides);
  return {
    config,
    // The host's instance-profile credentials: the agent runs with its role's policy.
    ec2Client: () => lab.ec2Client(host.credentials),
    metadata: createMetadataService({ endpoint: host.imds.endpoint }),
    docker: config.docker.control === "none" ? undefined : host.dockerService(),
    defaultDataRoot: host.paths.defaultDataRoot,
    log: options.log,
    pollMs: 100,
    ...(options.startPrewarm ? { startPrewarm: options.startPrewarm } : {}),
    ...(options.prewarmFromMount ? { prewarmFromMount: options.prewarmFromMount } : {}),
    ...(options.startRefresh ? { startRefresh: options.startRefresh } : {}),
    ...(options.fio ? { fio: options.fio } : {}),
    // A lab host has no systemd to ask: a reboot says so itself (the stand-in's reboot()).
    ...(options.rebootQueued !== undefined ? { rebootQueued: async () => options.rebootQueued === true } : {}),
    // The lab has no systemd unit for its dockerd: the host says how it starts it.
    dockerdCommand: async () => host.dockerdCommand(),
  };
}

/**
 * Boots the agent in this process on a lab host, with the host's dockerd as docker.service.
 * `startPrewarm` stands for the detached `ebs-cache-agent prewarm --background` a host starts
 * (e.g. prewarmLabHost, in this process); without it a long initialization runs inline.
 */
export async function bootLabHost(
  lab: Lab,
  host: LabHost,
  options: {
    overrides?: ConfigOverrides;
    dryRun?: boolean;
    log: Logger;
    startPrewarm?: () => Promise<void>;
    /** Stands for ebs-cache-agent-prewarm.service, which the first phase starts (prewarmLabHost with fromMount). */
    prewarmFromMount?: PrewarmFromMount;
    /**
     * Stands for the detached `ebs-cache-agent refresh --background` (e.g. refreshLabHost); used with refresh.enabled.
     */
    startRefresh?: () => Promise<void>;
    fio?: string;
    withDocker?: boolean;
    mayClaim?: boolean;
    /** Stands for systemd's READY=1 of phase 2's unit (what cloud-final waits for): docker final. */
    dataRootFinal?: () => Promise<void>;
  },
): Promise<BootOutcome> {
  // withDocker false / mayClaim false: `boot --no-docker` (phase 1) / `boot --no-claim` (phase 2).
  const wiring = labWiring(lab, host, options);
  return runBoot(wiring.config, wireAdapters(wiring), {
    dryRun: options.dryRun ?? false,
    ...(options.withDocker !== undefined ? { withDocker: options.withDocker } : {}),
    ...(options.mayClaim !== undefined ? { mayClaim: options.mayClaim } : {}),
    ...(options.dataRootFinal ? { dataRootFinal: options.dataRootFinal } : {}),
  });
}

/** `ebs-cache-agent prewarm` in this process on a lab host. */
export async function prewarmLabHost(
  lab: Lab,
  host: LabHost,
  options: { overrides?: ConfigOverrides; log: Logger } & PrewarmCommandOptions,
): Promise<PrewarmOutcome> {
  const wiring = labWiring(lab, host, options);
  return runPrewarm(wiring.config, wireAdapters(wiring), options);
}

/** Releases in this process on a lab host (what ebs-cache-agent-release.service's ExecStop does at shutdown). */
export async function releaseLabHost(
  lab: Lab,
  host: LabHost,
  options: {
    overrides?: ConfigOverrides;
    dryRun?: boolean;
    log: Logger;
    rebootQueued?: boolean;
    prewarmFromMount?: PrewarmFromMount;
  },
): Promise<ReleaseOutcome> {
  const wiring = labWiring(lab, host, options);
  return runRelease(wiring.config, wireAdapters(wiring), { dryRun: options.dryRun ?? false });
}

/** `ebs-cache-agent refresh` in this process on a lab host (pulls through the host's private dockerd). */
export async function refreshLabHost(
  lab: Lab,
  host: LabHost,
  options: { overrides?: ConfigOverrides; dryRun?: boolean; log: Logger; signal?: AbortSignal },
): Promise<RefreshOutcome> {
  const wiring = labWiring(lab, host, options);
  return runRefresh(wiring.config, wireAdapters(wiring), {
    dryRun: options.dryRun ?? false,
    ...(options.signal ? { signal: options.signal } : {}),
  });
}

/** `ebs-cache-agent acceptance`'s parts on a lab host (runAcceptance runs them); `say` takes its printed lines. */
export function acceptanceLabDeps(
  lab: Lab,
  host: LabHost,
  options: { overrides?: ConfigOverrides; log: Logger; output: string; say(line: string): void },
): AcceptanceDeps {
  const wiring = labWiring(lab, host, options);
  return wireAcceptance(wiring.config, wireAdapters(wiring), { output: options.output, say: options.say });
}
