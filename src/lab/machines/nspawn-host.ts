/**
 * A lab host whose operating system is an engine machine (nspawn.ts): an instance of the lab's
 * EC2 emulator with its IMDS, and a booted Debian of that engine with the agent installed by
 * scripts/install.sh and its units enabled, as on an AMI. systemd runs the agent's phases around
 * docker.service; the host reads the outcome from the machine's journal and `status --json`.
 */
import { rm } from "node:fs/promises";
import type { ImageStore } from "../../docker/engine.ts";
import { AgentError } from "../../errors.ts";
import type { StatusDocument } from "../../status/document.ts";
import { labConfigJson, type ConfigOverrides } from "./agent.ts";
import type { Lab, LabHost } from "../lab.ts";
import { jobDone, machineDaemonJson } from "./nspawn-docker.ts";
import { journalText, type JournalEntry } from "./nspawn-journal.ts";
import { bootMachine, loopDeviceNumbers, prepareMachine, type Machine, type MachineSetup } from "./nspawn.ts";

/** Where the lab host's folders appear inside the machine. */
/** Where a machine sees the lab host's by-id and sysfs folders (bound in read-only). */
export const IN_MACHINE = { byId: "/run/ebs-cache-lab/by-id", sys: "/run/ebs-cache-lab/sys" };

/**
 * The agent's paths inside an engine machine: its own /etc/docker, state and docker socket, the lab host's devices as
 * bound in.
 */
export const MACHINE_AGENT_PATHS = {
  byIdDir: IN_MACHINE.byId,
  sysfsRoot: IN_MACHINE.sys,
  mountRoot: "/var/lib/ebs-cache",
  daemonJson: "/etc/docker/daemon.json",
  containerdConfig: "/etc/containerd/config.toml",
  dockerHost: "unix:///var/run/docker.sock",
  stateDir: "/var/lib/ebs-cache-agent",
  // The machine's own systemd (PID 1 there) runs its docker.service.
  unitsDir: "/etc/systemd/system",
  systemdRunDir: "/run/systemd/system",
} as const;
export const READY_UNIT = "ebs-cache-agent-ready.service";

/** What the host runs. */
export interface EngineHostOptions {
  rootfs: string;
  bundle: string;
  store: ImageStore;
  /** The instance's Name tag. */
  name: string;
  /** config.json keys on top of the lab's (pool, imageSet, …). */
  overrides: ConfigOverrides;
  /** More of the machine: files, units it wants, drop-ins. */
  machine?: Pick<MachineSetup, "files" | "wants" | "dropIns">;
}

/** A booted engine host. */
export interface EngineHost {
  host: LabHost;
  machine: Machine;
  /** When its systemd was started (epoch ms): the stand-in for EC2's LaunchTime. */
  launchedAt: number;
}

/**
 * Adds a lab host and boots its machine: config.json points at the lab's emulators and the
 * machine's own paths (its /etc/docker, /var/lib/ebs-cache, docker socket), with the lab host's
 * by-id and sysfs folders bound in read-only. `onBooted` gets the machine before anything can
 * fail after the boot, so the caller can always destroy it.
 */
export async function startEngineHost(
  lab: Lab,
  options: EngineHostOptions,
  onBooted: (m: Machine) => void,
): Promise<EngineHost> {
  const host = await lab.addHost({ tags: { Name: options.name } });
  const config = labConfigJson(lab, host, {
    ...options.overrides,
    paths: MACHINE_AGENT_PATHS,
    metrics: { textfileDir: "/var/lib/prometheus/node-exporter" },
  });
  const prepared = await prepareMachine({
    rootfs: options.rootfs,
    bundle: options.bundle,
    config,
    daemonJson: machineDaemonJson(options.store),
    blockDevices: await loopDeviceNumbers(),
    ...options.machine,
  });
  let machine: Machine;
  const launchedAt = Date.now();
  try {
    machine = await bootMachine(prepared, [
      { from: host.paths.byIdDir, to: IN_MACHINE.byId, readOnly: true },
      { from: host.paths.sysfsRoot, to: IN_MACHINE.sys, readOnly: true },
    ]);
  } catch (error) {
    await rm(prepared.dir, { recursive: true, force: true });
    throw error;
  }
  onBooted(machine);
  return { host, machine, launchedAt };
}

/**
 * Waits until the agent's second phase (ebs-cache-agent-ready.service) has finished: its start job
 * (READY=1, once docker is final) and its run (`boot.done`, after the labels); returns the journal.
 */
export async function waitForReadyUnit(m: Machine, timeoutMs: number): Promise<JournalEntry[]> {
  const journal = await m.waitForJournal(
    (entries) => {
      const done = jobDone(entries, READY_UNIT, "start");
      return done && (done.jobResult !== "done" || readyRunEnded(entries)) ? entries : undefined;
    },
    timeoutMs,
    `the end of ${READY_UNIT}`,
  );
  const done = jobDone(journal, READY_UNIT, "start");
  if (done?.jobResult !== "done") {
    const agent = journalText(journal, (e) => e.identifier === "ebs-cache-agent" || e.unit === "docker.service");
    throw new AgentError(
      `${READY_UNIT} ended ${done?.jobResult ?? "without a result"} in ` +
        `${m.name}:\n${agent.split("\n").slice(-40).join("\n")}`,
      "see the agent's lines above",
    );
  }
  return journal;
}

/** Whether phase 2's run has ended: its last line, `boot.done` (the unit was started before, at READY=1). */
export function readyRunEnded(entries: JournalEntry[]): boolean {
  return entries.some(
    (e) => e.identifier === "ebs-cache-agent" && e.systemdUnit === READY_UNIT && e.message.startsWith("boot.done:"),
  );
}

/** `ebs-cache-agent status --json` inside the machine (src/status/document.ts's document). */
export async function machineStatus(m: Machine): Promise<StatusDocument> {
  // Its exit code is a health check: the document is what matters here.
  const out = await m.exec(["ebs-cache-agent", "status", "--json"], 60_000);
  try {
    return JSON.parse(out.stdout) as StatusDocument;
  } catch {
    throw new AgentError(
      `ebs-cache-agent status --json printed no document (exit ${out.exitCode}): ${out.stderr}${out.stdout}`,
      "see the machine's journal",
    );
  }
}
