/**
 * The real-systemd boot, on three docker engines (test/fixtures/lab/nspawn.ts ENGINES: Debian 12's
 * 20.10, Debian 13's 26.1, sid's 28.5): a Debian machine (debootstrap, cached) with docker.io, the
 * agent installed by scripts/install.sh and its units enabled, booted with `systemd-nspawn -b`
 * against the lab (EC2 + IMDS emulators on 127.0.0.1, the host's network shared, a pool of
 * loop-device volumes made from a golden snapshot). What is checked:
 * - ebs-cache-agent.service (boot --no-docker) finished before docker.service started, and
 *   claimed, attached and mounted a pool volume (emulator state + the machine's mount table);
 * - docker inside the machine runs on the volume's data-root with the golden images;
 * - ebs-cache-agent-ready.service (boot --no-claim) finished after docker started, reused the
 *   attached volume and published `state=ready`;
 * - ebs-cache-agent-release.service was active before phase 1 began;
 * - ebs-cache-agent-gc.service runs in its sandbox;
 * - (20.10) ebs-cache-agent-keeper.service, waiting for a volume it created, shows its progress
 *   line as the unit's StatusText (STATUS= from its sandbox), then ends successfully;
 * - at poweroff, docker stopped before ebs-cache-agent-release.service began to stop, its
 *   ExecStop (release) exited 0, and the volume is `available` again in the emulator, tagged
 *   `ebs-cache:released-at`.
 * Every engine runs that scenario; on docker 28 the first machine also reboots (a real reboot of
 * its systemd: nspawn exits 133 and boots the same root again, the volume's loop device and the
 * emulator's attachment staying, as an EBS attachment stays over an instance's reboot; see
 * rebootMachine), and the second instance takes the volume the first released and runs the
 * images from it without a pull. The unit-ordering scenario (phase 1
 * fails after attaching) is about systemd, not docker: it runs on 20.10 only.
 * The containerd image store (docker 28, `features.containerd-snapshotter`): first without the
 * agent, what docker does (a builder machine puts containerd's root on a volume and imports an
 * image; on another machine docker sees the image only once containerd's root is on the volume
 * too, and runs it without a pull); then through the agent: a containerd-store golden snapshot
 * (built in a docker 28 machine, tagged `ebs-cache:image-store=containerd`) beside the graphdriver
 * one in the same pool, a machine whose daemon.json asks for the containerd store claims the
 * containerd volume only, puts containerd's root on it, runs the images without a pull, a re-run
 * of both phases on the running machine attaches nothing new, a reboot attaches nothing new
 * either, poweroff releases it, and a second instance takes it.
 *
 * Needs root, debootstrap, systemd-nspawn (scripts/setup.sh installs them) and the network to
 * the Debian mirror the first time (the root file system is then cached under
 * /var/cache/ebs-cache-agent-test). It never skips: a machine that cannot run it fails it.
 */
import t, { type Test } from "tap";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  AttachVolumeCommand,
  CreateSnapshotCommand,
  CreateVolumeCommand,
  DeleteVolumeCommand,
  DescribeVolumesCommand,
  DetachVolumeCommand,
  waitUntilSnapshotCompleted,
  waitUntilVolumeAvailable,
  type Volume,
} from "@aws-sdk/client-ec2";
import { CONTAINERD_MACHINE_LOCAL_STATE, createContainerdConfig } from "../../../src/docker/containerd-store.ts";
import { createDockerEngine } from "../../../src/docker/engine.ts";
import {
  CLOUD_FINAL_UNIT,
  JOINED_LINE,
  joinTimeline,
  joinUnitFiles,
  sampleAfterJoinFiles,
} from "../../../src/lab/machines/nspawn-join.ts";
import { startOsparcSwarm } from "../../../src/lab/machines/osparc-swarm.ts";
import { run, type RunOptions } from "../../../src/exec.ts";
import { DOCKER_CLI } from "../../../src/lab/docker/dockerd.ts";
import { buildImage } from "../../../src/lab/docker/images.ts";
import {
  CONTAINERD_ROOT_SUBDIR,
  containerdRootOnVolume,
  DATA_ROOT_SUBDIR,
  FS_LABEL,
  MACHINE_LOCAL_STATE,
} from "../../../src/layout.ts";
import { labConfigJson } from "../../../src/lab/machines/agent.ts";
import {
  buildGoldenSnapshot,
  createPoolVolumes,
  poolTags,
  type GoldenSnapshot,
} from "../../../src/lab/volumes/golden.ts";
import type { ImageStore } from "../../../src/docker/engine.ts";
import { startLab, type Lab } from "../../../src/lab/lab.ts";
import { IN_MACHINE, MACHINE_AGENT_PATHS, readyRunEnded } from "../../../src/lab/machines/nspawn-host.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { agentBundle } from "../../fixtures/lab/agent-bundle.ts";
import { GOLDEN_REUSE_FOLDER } from "../../fixtures/lab/golden-reuse.ts";
import { pollUntil } from "../../fixtures/lab/lab-prereq.ts";
import {
  CACHE_BASE,
  ENGINE_NAMES,
  ENGINES,
  MessageId,
  assertNspawnPrerequisites,
  bootMachine,
  cachedRootfs,
  journalText,
  loopDeviceNumbers,
  machineMounts,
  prepareMachine,
  type EngineName,
  type EngineRootfs,
  type JournalEntry,
  type Machine,
  type MachineSetup,
} from "../../fixtures/lab/nspawn.ts";
import { LAB_WAIT } from "../../../src/lab/volumes/volumes.ts";

const POOL = "nspawn";
/** `dockerd --version` of each engine's machine. */
const ENGINE_VERSION: Record<EngineName, RegExp> = {
  "20.10": /^Docker version 20\.10\./,
  "26": /^Docker version 26\./,
  "28": /^Docker version 28\./,
};
const IMAGE_SET = "nspawn-set-1";
const MiB = 1024 * 1024;
const IMAGES = [
  { tag: "lab/app:1", payloadBytes: 2 * MiB },
  { tag: "lab/tool:1", payloadBytes: 1 * MiB },
];
const LABEL_PREFIX = "io.simcore.ebs-cache";
/** Where the lab host's folders appear inside the machine. */
const AGENT = "ebs-cache-agent.service";
const READY = "ebs-cache-agent-ready.service";
const RELEASE = "ebs-cache-agent-release.service";
const GC = "ebs-cache-agent-gc.service";
const KEEPER = "ebs-cache-agent-keeper.service";
const DOCKER = "docker.service";

/** How many runs of phase 2 have ended (their `boot.done` line). */
const doneLines = (entries: JournalEntry[]) =>
  entries.filter((e) => e.identifier === "ebs-cache-agent" && e.systemdUnit === READY && /^boot\.done:/.test(e.message))
    .length;

/** The first journal entry matching, or undefined. */
function first(entries: JournalEntry[], match: (e: JournalEntry) => boolean): JournalEntry | undefined {
  return entries.find(match);
}
const jobDone = (unit: string, type: "start" | "stop") => (e: JournalEntry) =>
  e.unit === unit && e.jobType === type && e.jobResult !== undefined && e.identifier === "systemd";
const starting = (unit: string) => (e: JournalEntry) =>
  e.unit === unit && e.messageId === MessageId.unitStarting && e.identifier === "systemd";
const stopping = (unit: string) => (e: JournalEntry) =>
  e.unit === unit && e.messageId === MessageId.unitStopping && e.identifier === "systemd";
/** systemd's "Main/Control process exited" lines of a unit. */
const processExits = (entries: JournalEntry[], unit: string) =>
  entries.filter((e) => e.identifier === "systemd" && e.unit === unit && /process exited, code=/.test(e.message));

/** What every machine shares: the bundle and the lab with its golden snapshot. */
interface Shared {
  bundle: string;
  lab: Lab;
  golden: GoldenSnapshot;
  describe(volumeId: string): Promise<Volume>;
}

/** One engine's: its root file system and a pool of its own (volumes never go from one engine to another). */
interface Setup extends Shared {
  engine: EngineRootfs;
  rootfs: string;
  pool: string;
  poolVolumes: string[];
}

const tagsOf = (volume: Volume) => Object.fromEntries((volume.Tags ?? []).map((tag) => [tag.Key!, tag.Value ?? ""]));

type Timer = <T>(name: string, work: () => Promise<T>) => Promise<T>;

/**
 * The engines' root file systems (cachedRootfs), all asked for at once by the first test: a first
 * build takes minutes of debootstrap, so the three overlap each other and the shared setup instead
 * of following one another. Each test awaits the one it boots; what it gets is the same.
 */
const rootfsBuilds = new Map<EngineName, ReturnType<typeof cachedRootfs>>();
function startRootfsBuilds(): void {
  for (const name of ENGINE_NAMES) {
    if (rootfsBuilds.has(name)) continue;
    const build = cachedRootfs(ENGINES[name], (line) => t.comment(line));
    build.catch(() => undefined); // its failure is reported by the test that awaits it
    rootfsBuilds.set(name, build);
  }
}
function rootfsOf(name: EngineName): ReturnType<typeof cachedRootfs> {
  startRootfsBuilds();
  return rootfsBuilds.get(name)!;
}

/** Built once, by the first test that asks (with its timer); torn down when the file ends. */
let sharedPromise: Promise<Shared> | undefined;
function shared(time: Timer): Promise<Shared> {
  sharedPromise ??= (async () => {
    await assertNspawnPrerequisites();
    startRootfsBuilds();
    // The run's production build of the agent (one per `npm test`), as install.sh installs it.
    const bundle = await time("bundle", () => agentBundle());
    const labLog = createMemoryLogger("info");
    const lab: Lab = await time("lab", () => startLab({ name: "nspawn", log: labLog }));
    t.teardown(() => lab.close()); // after every subtest's machine is destroyed
    const golden = await time("golden", () =>
      buildGoldenSnapshot(lab, {
        pool: POOL,
        imageSet: IMAGE_SET,
        images: IMAGES,
        reuseFolder: GOLDEN_REUSE_FOLDER,
        log: labLog,
      }),
    );
    const ec2 = lab.ec2Client();
    const describe = async (volumeId: string): Promise<Volume> => {
      const out = await ec2.send(new DescribeVolumesCommand({ VolumeIds: [volumeId] }));
      return out.Volumes![0]!;
    };
    return { bundle, lab, golden, describe };
  })();
  return sharedPromise;
}

/** An engine's root file system (built once, cached) and a fresh pool of `count` volumes of its own. */
async function setup(name: EngineName, count: number, time: Timer, comment: (line: string) => void): Promise<Setup> {
  const s = await shared(time);
  const engine = ENGINES[name];
  const rootfs = await time("rootfs", () => rootfsOf(name));
  comment(
    `${engine.name}: root file system ${rootfs.dir}: ` +
      `${rootfs.built ? `built in ${(rootfs.ms / 1000).toFixed(1)} s` : "cached"}`,
  );
  const pool = `${POOL}-${name.replace(/\W/g, "")}-${++pools}`;
  const poolVolumes = await createPoolVolumes(s.lab, s.golden, { pool, imageSet: IMAGE_SET, count });
  return { ...s, engine, rootfs: rootfs.dir, pool, poolVolumes };
}
let pools = 0;

/**
 * A machine for a new lab host: the agent installed by install.sh (plus the given unit
 * drop-ins), its config pointing at the lab, booted. The test's teardown destroys it.
 */
async function startMachine(
  t: Test,
  s: Setup,
  name: string,
  time: Timer,
  dropIns?: Record<string, string>,
  store: ImageStore = "graphdriver",
  more: Pick<MachineSetup, "files" | "wants"> = {},
): Promise<{ m: Machine; instanceId: string; installLog: string; bootStarted: number }> {
  const host = await s.lab.addHost({ tags: { Name: name } });
  // The machine's config: the lab's endpoints, the machine's own paths (its /etc/docker,
  // /var/lib/ebs-cache, docker socket), the lab host's by-id and sysfs folders as bound in.
  const config = labConfigJson(s.lab, host, {
    pool: s.pool,
    imageSet: IMAGE_SET,
    logLevel: "debug",
    paths: MACHINE_AGENT_PATHS,
  });
  const blockDevices = await loopDeviceNumbers();
  const prepared = await time("prepare", () =>
    prepareMachine({
      rootfs: s.rootfs,
      bundle: s.bundle,
      config,
      // The machine shares the host's network namespace (to reach the emulators): its dockerd
      // must not create a bridge or iptables rules there. The agent keeps these keys.
      daemonJson: {
        bridge: "none",
        iptables: false,
        "ip-forward": false,
        "ip-masq": false,
        ...(store === "containerd" ? { features: { "containerd-snapshotter": true } } : {}),
      },
      blockDevices,
      ...(dropIns ? { dropIns } : {}),
      ...more,
    }),
  );
  // Destroys whatever is left of the machine (or its copy, should the boot fail).
  const booted: { machine?: Machine } = {};
  t.teardown(async () => {
    if (booted.machine) await booted.machine.destroy();
    else await rm(prepared.dir, { recursive: true, force: true });
  });
  const bootStarted = Date.now();
  booted.machine = await bootMachine(prepared, [
    { from: host.paths.byIdDir, to: IN_MACHINE.byId, readOnly: true },
    { from: host.paths.sysfsRoot, to: IN_MACHINE.sys, readOnly: true },
  ]);
  return { m: booted.machine, instanceId: host.instance.instanceId, installLog: prepared.installLog, bootStarted };
}

/** A timer that records into `timings`. */
function timer(timings: Record<string, number>): Timer {
  return async (name, work) => {
    const started = Date.now();
    try {
      return await work();
    } finally {
      timings[name] = Date.now() - started;
    }
  };
}
const timingsText = (timings: Record<string, number>) =>
  `timings (s): ${Object.entries(timings)
    .map(([k, v]) => `${k} ${(v / 1000).toFixed(1)}`)
    .join(", ")}`;
const agentLines = (entries: JournalEntry[]) =>
  journalText(
    entries,
    (e) =>
      e.identifier === "ebs-cache-agent" ||
      e.unit === AGENT ||
      e.unit === READY ||
      e.unit === RELEASE ||
      e.unit === DOCKER,
  );

/**
 * The whole boot on one machine of `s`'s engine: phase 1 before docker, docker on the volume,
 * phase 2 ready, gc, poweroff releases. Returns the volume it used and released.
 */
async function bootAndRelease(
  t: Test,
  s: Setup,
  machineName: string,
  timings: Record<string, number>,
  options: { store?: ImageStore; rerun?: boolean; reboot?: boolean; keeper?: boolean } = {},
): Promise<string> {
  const time = timer(timings);
  const { poolVolumes, describe } = s;
  const store = options.store ?? "graphdriver";
  const { m, instanceId, installLog, bootStarted } = await startMachine(t, s, machineName, time, undefined, store);
  t.match(installLog, /installed under/, "install.sh installed the agent into the machine");
  let volumeId = "none";
  let journal: JournalEntry[] = [];
  try {
    journal = await m.waitForJournal(
      (entries) => (first(entries, jobDone(READY, "start")) && readyRunEnded(entries) ? entries : undefined),
      300_000,
      `the end of ${READY}`,
    );
    timings.boot = Date.now() - bootStarted;

    // Phase 1 before docker.
    const agentDone = first(journal, jobDone(AGENT, "start"));
    const dockerStarting = first(journal, starting(DOCKER));
    t.equal(agentDone?.jobResult, "done", `${AGENT} started successfully`);
    t.ok(dockerStarting, `${DOCKER} started`);
    t.ok(
      agentDone && dockerStarting && agentDone.seq < dockerStarting.seq,
      `${AGENT} finished before ${DOCKER} started`,
    );
    t.same(
      processExits(journal, AGENT).filter((e) => !/status=0\//.test(e.message)),
      [],
      `${AGENT} (boot --no-docker) exited 0: ready, not degraded`,
    );
    // Phase 2 after docker: it reused the volume phase 1 attached and published state=ready.
    const readyDone = first(journal, jobDone(READY, "start"));
    const dockerStarted = first(journal, jobDone(DOCKER, "start"));
    t.equal(dockerStarted?.jobResult, "done", `${DOCKER} started successfully`);
    t.equal(readyDone?.jobResult, "done", `${READY} started successfully`);
    t.ok(
      dockerStarted && readyDone && dockerStarted.seq < readyDone.seq,
      `${READY} finished after ${DOCKER} had started`,
    );
    t.same(
      processExits(journal, READY).filter((e) => !/status=0\//.test(e.message)),
      [],
      `${READY} (boot --no-claim) exited 0: ready, not degraded`,
    );
    const readyLines = journal.filter((e) => e.systemdUnit === READY && e.identifier === "ebs-cache-agent");
    t.ok(
      readyLines.some((e) => /^boot\.reuse:/.test(e.message)),
      `${READY} reused the attached volume (boot.reuse)${readyLines.length ? "" : ": it logged nothing"}`,
    );
    t.same(
      readyLines.filter((e) => /^boot\.claim:/.test(e.message)).map((e) => e.message),
      [],
      `${READY} claimed nothing (--no-claim)`,
    );
    t.ok(
      readyLines.some((e) => /^labels\.publish: /.test(e.message) && e.message.includes(`${LABEL_PREFIX}.state=ready`)),
      `${READY} published the label ${LABEL_PREFIX}.state=ready`,
    );
    t.ok(
      readyLines.some((e) => /^boot\.ready: /.test(e.message)),
      `${READY} logged boot.ready`,
    );
    // The release unit: active from boot, before phase 1 began.
    const releaseStarted = first(journal, jobDone(RELEASE, "start"));
    const agentStarting = first(journal, starting(AGENT));
    t.equal(releaseStarted?.jobResult, "done", `${RELEASE} is active (ExecStart=/bin/true)`);
    t.ok(
      releaseStarted && agentStarting && releaseStarted.seq < agentStarting.seq,
      `${RELEASE} was active before ${AGENT} began`,
    );

    // The volume: attached to this instance (emulator), mounted inside the machine.
    const attached = [];
    for (const id of poolVolumes) {
      const volume = await describe(id);
      if (volume.Attachments?.some((a) => a.InstanceId === instanceId && a.State === "attached")) attached.push(volume);
    }
    t.equal(attached.length, 1, "one pool volume is attached to the machine's instance");
    volumeId = attached[0]?.VolumeId ?? "none";
    t.equal(tagsOf(attached[0] ?? {})[VolumeTag.claimedBy], instanceId, "and tagged claimed-by this instance");
    const mountPoint = `/var/lib/ebs-cache/${volumeId}`;
    const mount = (await machineMounts(m.pid1)).find((entry) => entry.target === mountPoint);
    t.ok(mount, `the volume is mounted at ${mountPoint} inside the machine`);
    t.equal(mount?.fsType, "xfs", "XFS");
    t.match(mount?.source ?? "", /^\/dev\/loop\d+$/, "from its (loop) device");
    t.match(mount?.options ?? "", /noatime/, "noatime");
    const outside = await readFile("/proc/self/mountinfo", "utf8");
    t.notOk(outside.includes(` ${mountPoint} `), "the mount lives in the machine's namespace, not on the host");

    // Docker inside the machine, through its socket as seen from the host.
    const engine = createDockerEngine({ host: `unix:///proc/${m.pid1}/root/run/docker.sock` });
    const info = await engine.info();
    t.equal(info.dockerRootDir, `${mountPoint}/docker`, "docker in the machine runs on the volume's data-root");
    t.equal(info.imageStore, store, `with the ${store} image store`);
    if (store === "containerd") await assertContainerdOnVolume(t, m, mountPoint, volumeId);
    t.match(
      (await m.exec(["dockerd", "--version"])).stdout,
      ENGINE_VERSION[engineNameOf(s.engine)],
      `the machine runs ${s.engine.name}`,
    );
    const images = await engine.images();
    for (const image of IMAGES) t.ok(images.includes(image.tag), `${image.tag} is there without a pull`);
    // The image runs from the volume: no registry is reachable, and --pull=never forbids trying.
    // (An imported image has no PATH: the shell by its path.)
    const ran = await m.exec(
      ["docker", "run", "--rm", "--pull=never", "--network=none", IMAGES[0]!.tag, "/bin/sh", "-c", "exit 0"],
      120_000,
    );
    t.equal(
      ran.exitCode,
      0,
      `${IMAGES[0]!.tag} runs from the volume without a pull${ran.exitCode === 0 ? "" : `: ${ran.stderr}`}`,
    );
    t.ok(info.labels.includes(`${LABEL_PREFIX}.state=ready`), "the engine label state=ready is published");
    t.ok(info.labels.includes(`${LABEL_PREFIX}.volume-id=${volumeId}`), "with the volume id");

    if (options.rerun) await rerunBoot(t, m, s, volumeId, instanceId);
    // From here on, the checks read the journal of the boot that powers off.
    let bootId: string | undefined;
    if (options.reboot) bootId = await rebootMachine(t, m, s, { volumeId, instanceId, store, timings });
    const ofThisBoot = (entries: JournalEntry[]) =>
      bootId === undefined ? entries : entries.filter((e) => e.bootId === bootId);

    // gc runs in its (stricter) sandbox.
    const gc = await m.exec(["systemctl", "start", GC], 180_000);
    journal = ofThisBoot(await m.journal());
    t.equal(
      gc.exitCode,
      0,
      `systemctl start ${GC} ` +
        "succeeds" +
        (gc.exitCode === 0
          ? ""
          : `: ${gc.stderr}\n${journalText(journal, (e) => e.unit === GC || e.systemdUnit === GC)}`),
    );
    t.ok(
      journal.some((e) => e.systemdUnit === GC && /\b0 failed, [1-9]\d* managed volumes seen/.test(e.message)),
      "gc reached EC2 from its sandbox and saw the managed volumes (deleting none: none expired)",
    );
    if (options.keeper) await keeperStatus(t, m, s);

    // Poweroff: docker stops, then the release unit's ExecStop releases the volume.
    const poweroffStarted = Date.now();
    const code = await m.poweroff(240_000);
    timings.poweroff = Date.now() - poweroffStarted;
    t.equal(code, 0, "the machine powered off cleanly");
    journal = ofThisBoot(await m.journal());
    const dockerStopped = first(journal, jobDone(DOCKER, "stop"));
    const releaseStopping = first(journal, stopping(RELEASE));
    t.ok(
      dockerStopped && releaseStopping && dockerStopped.seq < releaseStopping.seq,
      `${DOCKER} stopped before ${RELEASE} began to stop (ExecStop=release)`,
    );
    const agentStopped = first(journal, jobDone(AGENT, "stop"));
    t.ok(
      agentStopped && releaseStopping && agentStopped.seq < releaseStopping.seq,
      `${AGENT} (no ExecStop) stopped before the release began`,
    );
    const releaseLines = journal.filter((e) => e.identifier === "ebs-cache-agent" && e.systemdUnit === RELEASE);
    t.ok(
      releaseLines.some((e) => /^release\./.test(e.message)),
      `release logged to the journal under ebs-cache-agent, from ${RELEASE}`,
    );
    // systemd logs a control process's exit only when it failed; a unit whose processes all
    // exited 0 is "Deactivated successfully" (a failed ExecStop gives "Failed with result").
    const afterReleaseStopping = (e: JournalEntry) => releaseStopping !== undefined && e.seq > releaseStopping.seq;
    t.same(
      processExits(journal, RELEASE)
        .filter(afterReleaseStopping)
        .map((e) => e.message),
      [],
      "release exited 0: no failed process exit",
    );
    const releaseEnd = first(
      journal,
      (e) =>
        afterReleaseStopping(e) &&
        e.identifier === "systemd" &&
        e.unit === RELEASE &&
        /Deactivated successfully|Failed with result/.test(e.message),
    );
    t.match(
      releaseEnd?.message ?? "(none)",
      /Deactivated successfully/,
      `${RELEASE} deactivated successfully (ExecStop=release exited 0)`,
    );
    const releaseStopped = first(journal, jobDone(RELEASE, "stop"));
    t.equal(releaseStopped?.jobResult, "done", `${RELEASE} stopped`);
    // The mount is released by the agent; should systemd unmount it itself at shutdown (it
    // does so for mounts left over), that must come after the release's stop, not race it.
    const systemdUnmount = first(
      journal,
      (e) => e.identifier === "systemd" && /^Unmounting .*ebs-cache/.test(e.message) && e.message.includes(volumeId),
    );
    t.ok(
      systemdUnmount === undefined || (releaseStopped !== undefined && systemdUnmount.seq > releaseStopped.seq),
      "systemd's own unmount of the volume (if any) comes after the release unit stopped",
    );
    const released = await pollUntil(async () => (await describe(volumeId)).State === "available", 30_000, 250);
    const after = await describe(volumeId);
    t.ok(released, `${volumeId} is available again`);
    t.same(after.Attachments ?? [], [], "with no attachment");
    t.match(tagsOf(after)[VolumeTag.releasedAt] ?? "", /^\d{4}-\d\d-\d\dT/, "tagged ebs-cache:released-at");
    if (store === "containerd") {
      const config = await readFile(join(m.dir, "etc/containerd/config.toml"), "utf8");
      t.notMatch(config, /^root = /m, "the release put config.toml back: no root on the volume any more");
      t.ok(
        releaseLines.some((e) => /^release\.containerd: /.test(e.message)),
        "the release saw containerd's root on the volume and put it back before the unmount",
      );
    }
  } finally {
    const entries = await m.journal().catch(() => journal);
    if (!t.passing()) {
      t.comment(`the machine's journal (agent, ready, docker):\n${agentLines(entries)}`);
      t.comment(`console tail:\n${m.console().slice(-6000)}`);
    }
    t.comment(timingsText(timings));
  }
  return volumeId;
}

/**
 * The keeper unit, started as systemd starts it, tells its wait for a new volume as STATUS=
 * (systemd-notify from the sandboxed oneshot, NotifyAccess=all): a pool of its own with a usable
 * snapshot, the new volume held `creating` (the emulator's stuckCreate fault) until `systemctl show`
 * has shown the progress line, then let go; the unit then ends successfully.
 */
async function keeperStatus(t: Test, m: Machine, s: Setup): Promise<void> {
  const ec2 = s.lab.ec2Client();
  const pool = `${s.pool}-keeper`;
  const zone = `${s.lab.region}a`;
  // The keeper stocks from the pool's newest completed snapshot of its image set (tags as the build makes them).
  const tags = Object.entries(poolTags(pool, IMAGE_SET, s.golden.images, s.golden.built));
  const source = await ec2.send(new CreateVolumeCommand({ AvailabilityZone: zone, Size: 1 }));
  await waitUntilVolumeAvailable({ client: ec2, ...LAB_WAIT }, { VolumeIds: [source.VolumeId!] });
  const snapshot = await ec2.send(
    new CreateSnapshotCommand({
      VolumeId: source.VolumeId!,
      TagSpecifications: [
        {
          ResourceType: "snapshot",
          Tags: tags.map(([Key, Value]) => ({ Key, Value })),
        },
      ],
    }),
  );
  await waitUntilSnapshotCompleted({ client: ec2, ...LAB_WAIT }, { SnapshotIds: [snapshot.SnapshotId!] });
  await ec2.send(new DeleteVolumeCommand({ VolumeId: source.VolumeId! }));

  // The machine's config, for that pool, one volume wanted in one zone; the unit reads it by drop-in.
  const config = JSON.parse(await readFile(join(m.dir, "etc/ebs-cache-agent/config.json"), "utf8")) as Record<
    string,
    unknown
  >;
  const keeperConfig = "/etc/ebs-cache-agent/keeper-status.json";
  await writeFile(
    join(m.dir, keeperConfig),
    JSON.stringify({ ...config, pool, keeper: { zones: [zone], minAvailable: 1, maxAvailable: 1 } }),
  );
  const dropInDir = join(m.dir, `etc/systemd/system/${KEEPER}.d`);
  await mkdir(dropInDir, { recursive: true });
  await writeFile(
    join(dropInDir, "status-test.conf"),
    `# Test: the keeper of a pool of its own.\n[Service]\nEnvironment=EBS_CACHE_AGENT_CONFIG=${keeperConfig}\n`,
  );
  await inMachine(t, m, ["systemctl", "daemon-reload"]);

  const keeperJournal = async () =>
    journalText(await m.journal(), (e) => e.unit === KEEPER || e.systemdUnit === KEEPER);
  const faults = s.lab.ec2.faults();
  s.lab.ec2.setFaults({ ...faults, stuckCreate: true });
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    s.lab.ec2.setFaults(faults);
  };
  try {
    await inMachine(t, m, ["systemctl", "start", "--no-block", KEEPER]);
    let statusText = "";
    // Stops early should the unit fail (it cannot have ended well while its volume is held).
    const shown = await pollUntil(
      async () => {
        const out = await m.exec(["systemctl", "show", "-p", "StatusText", "-p", "ActiveState", KEEPER], 30_000);
        statusText = /^StatusText=(.*)$/m.exec(out.stdout)?.[1] ?? "";
        return /of \d+ volumes available/.test(statusText) || /^ActiveState=failed$/m.test(out.stdout);
      },
      120_000,
      250,
    );
    t.match(
      statusText,
      /^\d+ of 1 volumes available\b/,
      `systemctl show -p StatusText ${KEEPER} gave the keeper's progress while it waited` +
        (shown ? "" : ` (not within 120 s):\n${await keeperJournal()}`),
    );
    t.match(statusText, /waiting for vol-\w+ \(\S+\): creating/, "naming the volume it waits for, still creating");
    release();
    const ended = await pollUntil(
      async () => {
        const out = await m.exec(["systemctl", "show", "-p", "ActiveState", "--value", KEEPER], 30_000);
        return /^(inactive|failed)$/.test(out.stdout.trim());
      },
      120_000,
      250,
    );
    const result = (await m.exec(["systemctl", "show", "-p", "Result", "--value", KEEPER], 30_000)).stdout.trim();
    t.ok(ended, `${KEEPER} ended once the volume became available`);
    t.equal(
      result,
      "success",
      `${KEEPER} ended successfully` + (result === "success" ? "" : `:\n${await keeperJournal()}`),
    );
    const made = (
      await ec2.send(new DescribeVolumesCommand({ Filters: [{ Name: `tag:${VolumeTag.pool}`, Values: [pool] }] }))
    ).Volumes;
    t.same(
      made?.map((v) => [v.SnapshotId, v.State]),
      [[snapshot.SnapshotId, "available"]],
      "the keeper made the pool's one volume, from its snapshot, now available",
    );
  } finally {
    release();
  }
}

const engineNameOf = (engine: EngineRootfs) => ENGINE_NAMES.find((name) => ENGINES[name] === engine)!;

/** Disables a product unit in a machine that exercises docker alone. */
const DISABLED =
  "# Test: this machine exercises docker alone.\n[Unit]\nConditionPathExists=/run/ebs-cache-test-never\n";
const VOLUME_IN_MACHINE = "/mnt/cache-volume";

/**
 * A docker 28 machine without the agent (its units skipped) whose docker uses the containerd
 * image store; docker.service has started.
 */
async function containerdStoreMachine(t: Test, bundle: string): Promise<Machine> {
  const rootfs = await rootfsOf("28");
  const prepared = await prepareMachine({
    rootfs: rootfs.dir,
    bundle,
    config: {},
    daemonJson: {
      bridge: "none",
      iptables: false,
      "ip-forward": false,
      "ip-masq": false,
      features: { "containerd-snapshotter": true },
    },
    blockDevices: await loopDeviceNumbers(),
    dropIns: { [AGENT]: DISABLED, [READY]: DISABLED, [RELEASE]: DISABLED },
  });
  const booted: { machine?: Machine } = {};
  t.teardown(async () => {
    if (booted.machine) await booted.machine.destroy();
    else await rm(prepared.dir, { recursive: true, force: true });
  });
  booted.machine = await bootMachine(prepared, []);
  await booted.machine.waitForJournal(
    (entries) => (first(entries, jobDone(DOCKER, "start")) ? true : undefined),
    180_000,
    `the start of ${DOCKER}`,
  );
  return booted.machine;
}

/** Runs a command in the machine; fails the test with its output when it does not exit 0. */
async function inMachine(t: Test, m: Machine, args: string[]): Promise<string> {
  const out = await m.exec(args);
  if (out.exitCode !== 0) t.fail(`${args.join(" ")} exited ${out.exitCode}: ${out.stderr}${out.stdout}`);
  return out.stdout;
}

/** Points the machine's docker at the volume: data-root and (when asked) containerd's root, both restarted. */
async function dockerOnVolume(
  t: Test,
  m: Machine,
  options: { containerdRoot: boolean },
): Promise<ReturnType<typeof createDockerEngine>> {
  const containerd = createContainerdConfig({ path: join(m.dir, "etc/containerd/config.toml") });
  if (options.containerdRoot)
    t.equal(
      await containerd.setRoot(containerdRootOnVolume(VOLUME_IN_MACHINE)),
      true,
      "containerd's root set to the volume's containerd/",
    );
  const daemonJson = join(m.dir, "etc/docker/daemon.json");
  const config = JSON.parse(await readFile(daemonJson, "utf8")) as Record<string, unknown>;
  await writeFile(
    daemonJson,
    JSON.stringify({ ...config, "data-root": join(VOLUME_IN_MACHINE, DATA_ROOT_SUBDIR) }, null, 2) + "\n",
  );
  await inMachine(t, m, ["systemctl", "stop", "docker.service", "docker.socket"]);
  await inMachine(t, m, ["systemctl", "restart", "containerd.service"]);
  await inMachine(t, m, ["systemctl", "start", "docker.service"]);
  return createDockerEngine({ host: `unix:///proc/${m.pid1}/root/run/docker.sock` });
}

/** containerd's root is the volume's containerd/ (config.toml), with the images' content and metadata. */
async function assertContainerdOnVolume(t: Test, m: Machine, mountPoint: string, volumeId: string): Promise<void> {
  const config = await readFile(join(m.dir, "etc/containerd/config.toml"), "utf8");
  t.match(
    config,
    new RegExp(`^root = "${mountPoint}/containerd"$`, "m"),
    "config.toml's root is the volume's containerd/",
  );
  const backup = await readFile(join(m.dir, "etc/containerd/config.toml.ebs-cache-agent.bak"), "utf8").catch(
    () => "(none)",
  );
  t.match(backup, /^version = /m, "its backup is Debian's file as the machine had it");
  t.notMatch(backup, new RegExp(volumeId), "without the volume in it");
  const root = await readdir(join(`/proc/${m.pid1}/root`, mountPoint, CONTAINERD_ROOT_SUBDIR)).catch(
    (): string[] => [],
  );
  t.ok(
    root.includes("io.containerd.content.v1.content") && root.includes("io.containerd.metadata.v1.bolt"),
    "containerd's content store and metadata are on the volume",
  );
}

/**
 * Phase 1 and phase 2 once more on the running machine, docker up on the volume (a re-run by
 * hand, or after the agent was killed): they reuse the volume, attach nothing, and docker keeps
 * its images. Not a reboot (rebootMachine is): here phase 1 meets the volume mounted and docker
 * running on it.
 */
async function rerunBoot(t: Test, m: Machine, s: Setup, volumeId: string, instanceId: string): Promise<void> {
  const before = await s.describe(volumeId);
  const claimedAt = tagsOf(before)[VolumeTag.claimedAt];
  const phase1 = await m.exec(["systemctl", "restart", AGENT], 180_000);
  t.equal(phase1.exitCode, 0, `${AGENT} ran again${phase1.exitCode === 0 ? "" : `: ${phase1.stderr}`}`);
  const runsBefore = doneLines(await m.journal());
  const phase2 = await m.exec(["systemctl", "restart", READY], 180_000);
  t.equal(phase2.exitCode, 0, `${READY} ran again${phase2.exitCode === 0 ? "" : `: ${phase2.stderr}`}`);
  // The restart returns at READY=1 (docker final): the run itself ends after its labels.
  await m.waitForJournal(
    (entries) => (doneLines(entries) > runsBefore ? true : undefined),
    180_000,
    `the end of ${READY}'s second run`,
  );
  const after = await s.describe(volumeId);
  t.equal(tagsOf(after)[VolumeTag.claimedAt], claimedAt, "the same claim: no new attach, no new claimed-at");
  t.same(
    after.Attachments?.map((a) => [a.InstanceId, a.State]),
    [[instanceId, "attached"]],
    "still attached to this instance only",
  );
  const journal = await m.journal();
  const rerunLines = journal.filter(
    (e) => e.identifier === "ebs-cache-agent" && (e.systemdUnit === AGENT || e.systemdUnit === READY),
  );
  t.same(
    rerunLines.filter((e) => /^boot\.claim:/.test(e.message)).length,
    1,
    "one claim over both runs of phase 1 (the first boot's)",
  );
  const ran = await m.exec(
    ["docker", "run", "--rm", "--pull=never", "--network=none", IMAGES[1]!.tag, "/bin/sh", "-c", "exit 0"],
    120_000,
  );
  t.equal(
    ran.exitCode,
    0,
    `after the re-run ${IMAGES[1]!.tag} still runs without a pull${ran.exitCode === 0 ? "" : `: ${ran.stderr}`}`,
  );
}

/**
 * A real reboot of the machine's systemd (Machine.reboot: nspawn exits 133, the same root boots
 * again with a new boot id; the lab's loop device and the emulator's attachment stay, as an EBS
 * volume stays attached over an instance's reboot). Both phases run again in the new boot, reuse
 * the attached volume without an AttachVolume, docker comes up on it with the images and runs
 * one without a pull, and readiness is published again. Returns the new boot's id.
 *
 * An orderly `systemctl reboot`: systemd stops the units as at any shutdown, so the release
 * unit's ExecStop runs; EC2 shows the instance `running`, and the release learns from systemd's
 * queued reboot.target that the instance comes back (src/host/reboot.ts): it unmounts and keeps
 * the volume attached, as at a stop.
 */
async function rebootMachine(
  t: Test,
  m: Machine,
  s: Setup,
  at: { volumeId: string; instanceId: string; store: ImageStore; timings: Record<string, number> },
): Promise<string> {
  const { volumeId, instanceId, store } = at;
  const before = await s.describe(volumeId);
  const firstBoot = await m.bootId();
  const asked = s.lab.ec2.requests.records().length;
  const started = Date.now();
  await m.reboot(["systemctl", "reboot"], 180_000);
  const bootId = await m.bootId();
  t.not(bootId, firstBoot, `the machine rebooted: a new boot id (${firstBoot} -> ${bootId})`);
  const journal = await m.waitForJournal(
    (entries) => {
      const ofBoot = entries.filter((e) => e.bootId === bootId);
      return ofBoot.some(jobDone(READY, "start")) && readyRunEnded(ofBoot) ? entries : undefined;
    },
    300_000,
    `the end of ${READY} after the reboot`,
  );
  at.timings.reboot = Date.now() - started;
  t.ok(
    journal.some((e) => e.bootId === firstBoot && jobDone(READY, "start")(e)),
    "the journal holds the first boot's run too",
  );
  const thisBoot = journal.filter((e) => e.bootId === bootId);
  const released = journal
    .filter((e) => e.bootId === firstBoot && e.systemdUnit === RELEASE && e.identifier === "ebs-cache-agent")
    .map((e) => e.message);
  t.ok(
    released.some((line) => /^release\.shutdown: /.test(line) && /rebooting/.test(line)),
    `the release at the reboot's shutdown saw the reboot ` +
      `(${released.filter((line) => line.startsWith("release.shutdown")).join(" | ") || "no release.shutdown line"})`,
  );

  // Both phases ran again in the new boot, in their order around docker.
  const agentDone = first(thisBoot, jobDone(AGENT, "start"));
  const dockerStarting = first(thisBoot, starting(DOCKER));
  t.equal(agentDone?.jobResult, "done", `${AGENT} ran again in the new boot`);
  t.ok(agentDone && dockerStarting && agentDone.seq < dockerStarting.seq, `and finished before ${DOCKER} started`);
  t.equal(first(thisBoot, jobDone(READY, "start"))?.jobResult, "done", `${READY} ran again in the new boot`);
  t.same(
    [...processExits(thisBoot, AGENT), ...processExits(thisBoot, READY)]
      .filter((e) => !/status=0\//.test(e.message))
      .map((e) => e.message),
    [],
    "both exited 0",
  );
  const lines = (unit: string) =>
    thisBoot.filter((e) => e.systemdUnit === unit && e.identifier === "ebs-cache-agent").map((e) => e.message);
  t.ok(
    lines(AGENT).some((line) => /^boot\.reuse:/.test(line)),
    `${AGENT} reused the volume still attached (boot.reuse)`,
  );
  t.same(
    [...lines(AGENT), ...lines(READY)].filter((line) => /^boot\.claim:/.test(line)),
    [],
    "and claimed nothing",
  );
  t.ok(
    lines(READY).some((line) => /^labels\.publish: /.test(line) && line.includes(`${LABEL_PREFIX}.state=ready`)),
    `${READY} published ${LABEL_PREFIX}.state=ready again`,
  );

  // EC2: no attach, no detach, the same claim.
  const calls = s.lab.ec2.requests
    .records()
    .slice(asked)
    .filter((r) => r.instanceId === instanceId || r.volumeId === volumeId)
    .map((r) => r.action);
  t.same(
    calls.filter((a) => a === "AttachVolume" || a === "DetachVolume"),
    [],
    `no AttachVolume or DetachVolume over the reboot (EC2 calls: ${calls.join(", ")})`,
  );
  const after = await s.describe(volumeId);
  t.same(
    after.Attachments?.map((a) => [a.InstanceId, a.State]),
    [[instanceId, "attached"]],
    "the volume is still attached to this instance only",
  );
  t.equal(
    tagsOf(after)[VolumeTag.claimedAt],
    tagsOf(before)[VolumeTag.claimedAt],
    "under the same claim (claimed-at unchanged)",
  );

  // Docker of the new boot on the volume, with the images, and readiness on the engine.
  const mountPoint = `/var/lib/ebs-cache/${volumeId}`;
  t.ok(
    (await machineMounts(m.pid1)).some((e) => e.target === mountPoint && e.fsType === "xfs"),
    `the volume is mounted at ${mountPoint} again`,
  );
  const engine = createDockerEngine({ host: `unix:///proc/${m.pid1}/root/run/docker.sock` });
  const info = await engine.info();
  t.equal(info.dockerRootDir, `${mountPoint}/docker`, "docker runs on the volume's data-root again");
  t.equal(info.imageStore, store, `with the ${store} image store`);
  if (store === "containerd") await assertContainerdOnVolume(t, m, mountPoint, volumeId);
  const images = await engine.images();
  t.same(
    IMAGES.map((image) => image.tag).filter((tag) => !images.includes(tag)),
    [],
    "docker lists every image of the volume",
  );
  const ran = await m.exec(
    ["docker", "run", "--rm", "--pull=never", "--network=none", IMAGES[1]!.tag, "/bin/sh", "-c", "exit 0"],
    120_000,
  );
  t.equal(
    ran.exitCode,
    0,
    `${IMAGES[1]!.tag} runs from the volume without a pull after the ` +
      `reboot${ran.exitCode === 0 ? "" : `: ${ran.stderr}`}`,
  );
  t.ok(info.labels.includes(`${LABEL_PREFIX}.state=ready`), "the engine label state=ready is published again");
  t.ok(info.labels.includes(`${LABEL_PREFIX}.volume-id=${volumeId}`), "with the volume id");
  return bootId;
}

/**
 * A golden snapshot built with the containerd image store: a lab volume formatted by the agent's
 * rule, mounted in a docker 28 machine whose containerd root and data-root are on it, the images
 * imported, machine-local state dropped, snapshotted and tagged `image-store=containerd` (what
 * the Packer pool-volume flow does with `image_store=containerd`).
 */
async function containerdGolden(t: Test, s: Shared, pool: string): Promise<GoldenSnapshot> {
  const ec2 = s.lab.ec2Client();
  const host = await s.lab.addHost({ tags: { Name: "containerd-golden-builder" } });
  const created = await ec2.send(
    new CreateVolumeCommand({ AvailabilityZone: host.instance.availabilityZone, Size: 2, VolumeType: "gp3" }),
  );
  const volumeId = created.VolumeId!;
  const wait = { client: ec2, ...LAB_WAIT };
  await waitUntilVolumeAvailable(wait, { VolumeIds: [volumeId] });
  await ec2.send(
    new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: host.instance.instanceId, Device: "/dev/sdf" }),
  );
  t.ok(
    await pollUntil(async () => (await s.describe(volumeId)).Attachments?.[0]?.State === "attached", 60_000, 100),
    "the builder volume is attached",
  );
  const device = await s.lab.backend.deviceReady(volumeId);
  await run("mkfs.xfs", ["-q", "-L", FS_LABEL, "-m", "crc=1", "-n", "ftype=1", device]);

  const builder = await containerdStoreMachine(t, s.bundle);
  await inMachine(t, builder, ["mkdir", "-p", VOLUME_IN_MACHINE]);
  await inMachine(t, builder, ["mount", "-o", "noatime", device, VOLUME_IN_MACHINE]);
  const engine = await dockerOnVolume(t, builder, { containerdRoot: true });
  t.equal((await engine.info()).imageStore, "containerd", "the builder's docker uses the containerd store");
  const engineVersion =
    /version ([0-9][^\s,]*)/.exec((await builder.exec(["dockerd", "--version"])).stdout)?.[1] ?? "unknown";
  const hostSocket = `unix:///proc/${builder.pid1}/root/run/docker.sock`;
  const client = {
    docker: (args: readonly string[], options?: RunOptions) => run(DOCKER_CLI, ["-H", hostSocket, ...args], options),
    info: () => Promise.reject(new Error("not used")),
  };
  const work = await mkdtemp(join(CACHE_BASE, "containerd-golden-"));
  t.teardown(() => rm(work, { recursive: true, force: true }));
  for (const image of IMAGES)
    await buildImage(client, { tag: image.tag, workDir: work, payloadBytes: image.payloadBytes });
  await inMachine(t, builder, ["systemctl", "stop", "docker.service", "docker.socket", "containerd.service"]);
  for (const local of CONTAINERD_MACHINE_LOCAL_STATE)
    await inMachine(t, builder, ["rm", "-rf", join(VOLUME_IN_MACHINE, CONTAINERD_ROOT_SUBDIR, local)]);
  for (const local of MACHINE_LOCAL_STATE)
    await inMachine(t, builder, ["rm", "-rf", join(VOLUME_IN_MACHINE, DATA_ROOT_SUBDIR, local)]);
  await inMachine(t, builder, ["umount", VOLUME_IN_MACHINE]);
  t.equal(await builder.poweroff(120_000), 0, "the builder powered off");

  await ec2.send(new DetachVolumeCommand({ VolumeId: volumeId }));
  await waitUntilVolumeAvailable(wait, { VolumeIds: [volumeId] });
  const images = IMAGES.map((image) => image.tag);
  const built = { store: "containerd" as const, engineVersion };
  const snapshot = await ec2.send(
    new CreateSnapshotCommand({
      VolumeId: volumeId,
      TagSpecifications: [
        {
          ResourceType: "snapshot",
          Tags: Object.entries(poolTags(pool, IMAGE_SET, images, built)).map(([Key, Value]) => ({ Key, Value })),
        },
      ],
    }),
  );
  await waitUntilSnapshotCompleted(wait, { SnapshotIds: [snapshot.SnapshotId!] });
  await ec2.send(new DeleteVolumeCommand({ VolumeId: volumeId }));
  return { snapshotId: snapshot.SnapshotId!, sizeGiB: 2, images, built };
}

/** The lines of the agent, docker and the join, for a failure's output. */
async function joinJournal(m: Machine, journal: JournalEntry[]): Promise<string> {
  const entries = await m.journal().catch(() => journal);
  return `the machine's journal:\n${journalText(
    entries,
    (e) =>
      e.identifier === "ebs-cache-agent" ||
      [AGENT, READY, DOCKER, CLOUD_FINAL_UNIT].includes(e.unit ?? e.systemdUnit ?? ""),
  )}`;
}

/**
 * Registers the scenarios of one part: "systemd" (docker 20.10 and 26 booted and powered off, the
 * unit ordering when phase 1 fails, osparc's join; nspawn-boot.lab.test.ts) or "docker-28" (docker 28
 * booted, rebooted and taken over, the containerd image store without and through the agent;
 * nspawn-containerd.lab.test.ts). Two files, so that neither comes near tap's per-file timeout when the
 * machine is shared, and each part's machines are its own.
 */
export function nspawnBootTests(part: "systemd" | "docker-28"): void {
  for (const name of ENGINE_NAMES.filter((n) => (n === "28") === (part === "docker-28"))) {
    t.test(
      `${ENGINES[name].name}: systemd boots the agent before docker, docker runs on the volume, poweroff releases it`,
      async (t) => {
        const timings: Record<string, number> = {};
        const s = await setup(name, 1, timer(timings), (line) => t.comment(line));
        const released = await bootAndRelease(t, s, `nspawn-${name.replace(/\W/g, "")}`, timings, {
          reboot: name === "28",
          // The keeper's STATUS= under this PID-1 systemd: checked on one machine (seconds).
          keeper: name === "20.10",
        });
        if (name !== "28") return;
        // A second instance takes the volume the first released (the pool's only one) and runs
        // the images from it.
        const second = await bootAndRelease(t, s, "nspawn-28-second", {});
        t.equal(second, released, `the second instance took ${released}, released by the first`);
      },
    );
  }
  if (part === "systemd") {
    t.test(
      `${ENGINES["20.10"].name}: phase 1 fails after attaching the volume: phase 2 reuses it, the release unit still ` +
        `releases it at poweroff`,
      async (t) => {
        const timings: Record<string, number> = {};
        const time = timer(timings);
        const s = await setup("20.10", 2, time, (line) => t.comment(line));
        const { poolVolumes, describe } = s;
        // The agent's own run succeeds (the volume is attached and mounted, daemon.json switched);
        // the unit then fails as after an exit 1: a failed unit gets no ExecStop.
        const { m, instanceId, bootStarted } = await startMachine(t, s, "nspawn-machine-phase1-fails", time, {
          [AGENT]:
            "# Test: phase 1 fails (as on exit 1) after the agent attached and mounted the " +
            "volume.\n[Service]\nExecStartPost=/bin/false\n",
        });
        let journal: JournalEntry[] = [];
        try {
          journal = await m.waitForJournal(
            (entries) => (first(entries, jobDone(READY, "start")) && readyRunEnded(entries) ? entries : undefined),
            300_000,
            `the end of ${READY}`,
          );
          timings.boot = Date.now() - bootStarted;
          t.equal(first(journal, jobDone(AGENT, "start"))?.jobResult, "failed", `${AGENT} failed`);
          t.equal(
            first(journal, jobDone(DOCKER, "start"))?.jobResult,
            "done",
            `${DOCKER} started anyway (Before= only orders)`,
          );
          t.equal(first(journal, jobDone(READY, "start"))?.jobResult, "done", `${READY} ran`);
          const readyLines = journal.filter((e) => e.systemdUnit === READY && e.identifier === "ebs-cache-agent");
          t.ok(
            readyLines.some((e) => /^boot\.reuse:/.test(e.message)),
            `${READY} reused the volume phase 1 attached`,
          );
          t.same(
            readyLines.filter((e) => /^boot\.claim:/.test(e.message)).map((e) => e.message),
            [],
            `${READY} claimed nothing (--no-claim)`,
          );
          const attached = [];
          for (const id of poolVolumes) {
            const volume = await describe(id);
            if (volume.Attachments?.some((a) => a.InstanceId === instanceId && a.State === "attached"))
              attached.push(volume);
          }
          t.equal(attached.length, 1, "one pool volume is attached to the machine's instance");
          const volumeId = attached[0]?.VolumeId ?? "none";
          t.equal(first(journal, jobDone(RELEASE, "start"))?.jobResult, "done", `${RELEASE} is active all the same`);

          const poweroffStarted = Date.now();
          const code = await m.poweroff(240_000);
          timings.poweroff = Date.now() - poweroffStarted;
          t.equal(code, 0, "the machine powered off cleanly");
          journal = await m.journal();
          const dockerStopped = first(journal, jobDone(DOCKER, "stop"));
          const releaseStopping = first(journal, stopping(RELEASE));
          t.ok(
            dockerStopped && releaseStopping && dockerStopped.seq < releaseStopping.seq,
            `${DOCKER} stopped before ${RELEASE} began to stop`,
          );
          const releaseEnd = first(
            journal,
            (e) =>
              releaseStopping !== undefined &&
              e.seq > releaseStopping.seq &&
              e.identifier === "systemd" &&
              e.unit === RELEASE &&
              /Deactivated successfully|Failed with result/.test(e.message),
          );
          t.match(releaseEnd?.message ?? "(none)", /Deactivated successfully/, "the release exited 0");
          const released = await pollUntil(async () => (await describe(volumeId)).State === "available", 30_000, 250);
          const after = await describe(volumeId);
          t.ok(released, `${volumeId} is available again`);
          t.same(after.Attachments ?? [], [], "with no attachment");
          t.match(tagsOf(after)[VolumeTag.releasedAt] ?? "", /^\d{4}-\d\d-\d\dT/, "tagged ebs-cache:released-at");
          t.notOk(tagsOf(after)[VolumeTag.claimedBy], "and no longer claimed-by the instance");
        } finally {
          const entries = await m.journal().catch(() => journal);
          if (!t.passing()) {
            t.comment(`the machine's journal (agent, ready, docker):\n${agentLines(entries)}`);
            t.comment(`console tail:\n${m.console().slice(-6000)}`);
          }
          t.comment(timingsText(timings));
        }
      },
    );

    t.test(
      `${ENGINES["20.10"].name}: osparc's join (cloud-final, after multi-user.target as on Debian) waits for docker ` +
        `on the volume, not for the pre-warm sample or the labels`,
      async (t) => {
        const timings: Record<string, number> = {};
        const time = timer(timings);
        const s = await setup("20.10", 1, time, (line) => t.comment(line));
        const swarmRoot = await mkdtemp(join(CACHE_BASE, "swarm-"));
        t.teardown(() => rm(swarmRoot, { recursive: true, force: true }));
        const swarm = await time("swarm", () => startOsparcSwarm(swarmRoot));
        t.teardown(() => swarm.stop());
        // The machine shares this namespace: the link, its address, its docker's gateway bridge are this run's.
        t.teardown(await swarm.linkHere("ebsjoin"));
        const userData = joinUnitFiles(await swarm.joinTarget());
        const { m, bootStarted } = await startMachine(t, s, "nspawn-machine-join", time, undefined, "graphdriver", {
          files: { ...userData.files, ...sampleAfterJoinFiles() },
          wants: userData.wants,
        });
        let journal: JournalEntry[] = [];
        try {
          journal = await m.waitForJournal(
            (entries) =>
              readyRunEnded(entries) && first(entries, jobDone(CLOUD_FINAL_UNIT, "start")) ? entries : undefined,
            300_000,
            `the end of ${READY} and of ${CLOUD_FINAL_UNIT}`,
          );
          const seqOf = (match: (e: JournalEntry) => boolean) => first(journal, match)?.seq ?? Number.NaN;
          const agentLine = (unit: string, event: string) => (e: JournalEntry) =>
            e.identifier === "ebs-cache-agent" && e.systemdUnit === unit && e.message.startsWith(`${event}:`);
          const joinDone = first(journal, jobDone(CLOUD_FINAL_UNIT, "start"));
          t.equal(joinDone?.jobResult, "done", `osparc's join (${CLOUD_FINAL_UNIT}) succeeded`);
          t.ok(
            journal.some((e) => e.systemdUnit === CLOUD_FINAL_UNIT && JOINED_LINE.test(e.message)),
            "docker says the node joined the swarm",
          );
          const joinStarting = seqOf(starting(CLOUD_FINAL_UNIT));
          // After: phase 1's switch, docker's start on it, phase 2's verification (READY=1).
          t.ok(seqOf(agentLine(AGENT, "boot.data-root")) < joinStarting, "the join began after phase 1's switch");
          t.ok(seqOf(jobDone(DOCKER, "start")) < joinStarting, `after ${DOCKER} started`);
          t.equal(first(journal, jobDone(READY, "start"))?.jobResult, "done", `${READY} started (READY=1)`);
          t.ok(seqOf(jobDone(READY, "start")) < joinStarting, `after ${READY} had started: docker final`);
          t.ok(seqOf(agentLine(READY, "boot.verified")) < joinStarting, "after docker was verified on the volume");
          // Before: the sample's end (it waits for the join here, so the order does not depend on speed) and the
          // run's end, labels included.
          const joinEnd = joinDone?.seq ?? Number.NaN;
          t.ok(joinEnd < seqOf(agentLine(READY, "prewarm.verdict")), "the join did not wait for the pre-warm sample");
          t.ok(joinEnd < seqOf(agentLine(READY, "boot.done")), "nor for the end of phase 2");
          const readyLine = first(journal, agentLine(READY, "boot.ready"));
          t.match(
            readyLine?.message,
            /prewarm=checking/,
            "ready was published while the sample ran (prewarm=checking)",
          );
          t.ok((readyLine?.seq ?? Number.NaN) < seqOf(agentLine(READY, "prewarm.verdict")), "before its verdict");
          const engine = createDockerEngine({ host: `unix:///proc/${m.pid1}/root/run/docker.sock` });
          const info = await engine.info();
          t.equal(info.swarm.state, "active", "the machine's docker is in the swarm");
          t.match(info.dockerRootDir, /^\/var\/lib\/ebs-cache\/vol-[0-9a-f]+\/docker$/, "on the volume's data-root");
          t.ok(info.labels.includes(`${LABEL_PREFIX}.state=ready`), "state=ready");
          t.notOk(
            info.labels.some((label) => label.endsWith(".prewarm=checking")),
            `the verdict replaced checking (${info.labels.filter((l) => l.includes("prewarm")).join(" ")})`,
          );
          const timeline = joinTimeline(journal, bootStarted, READY);
          t.comment(
            `launch -> joined (ms from the machine's start): ${JSON.stringify(timeline)}; ${timingsText(timings)}`,
          );
        } finally {
          if (!t.passing()) t.comment(await joinJournal(m, journal));
        }
      },
    );
    return;
  }
  t.test(
    `${ENGINES["28"].name}, containerd image store: the images are in containerd's root, which must be on the volume`,
    async (t) => {
      const timings: Record<string, number> = {};
      const time = timer(timings);
      const { bundle } = await shared(time);
      // The volume: a loop device of its own (this is about docker, not the claim).
      const work = await mkdtemp(join(CACHE_BASE, "containerd-store-"));
      t.teardown(() => rm(work, { recursive: true, force: true }));
      const file = join(work, "volume.img");
      await run("truncate", ["-s", "1G", file]);
      await run("mkfs.xfs", ["-q", "-L", FS_LABEL, "-m", "crc=1", "-n", "ftype=1", file]);
      const device = (await run("losetup", ["--find", "--show", file])).stdout.trim();
      t.teardown(() => run("losetup", ["--detach", device], { check: false }));

      // The builder: containerd's root on the volume, an image imported, machine-local state dropped.
      const builder = await time("builder", () => containerdStoreMachine(t, bundle));
      await inMachine(t, builder, ["mkdir", "-p", VOLUME_IN_MACHINE]);
      await inMachine(t, builder, ["mount", "-o", "noatime", device, VOLUME_IN_MACHINE]);
      const built = await dockerOnVolume(t, builder, { containerdRoot: true });
      const builtInfo = await built.info();
      t.equal(builtInfo.imageStore, "containerd", "the builder's docker uses the containerd store");
      t.equal(builtInfo.dockerRootDir, join(VOLUME_IN_MACHINE, DATA_ROOT_SUBDIR), "with its data-root on the volume");
      const host = `unix:///proc/${builder.pid1}/root/run/docker.sock`;
      const client = {
        docker: (args: readonly string[], options?: RunOptions) => run(DOCKER_CLI, ["-H", host, ...args], options),
        info: () => Promise.reject(new Error("not used")),
      };
      await buildImage(client, { tag: IMAGES[0]!.tag, workDir: work, payloadBytes: IMAGES[0]!.payloadBytes });
      const content = await readdir(
        join(`/proc/${builder.pid1}/root`, VOLUME_IN_MACHINE, CONTAINERD_ROOT_SUBDIR),
      ).catch((): string[] => []);
      t.ok(
        content.includes("io.containerd.content.v1.content") && content.includes("io.containerd.metadata.v1.bolt"),
        "the content store and containerd's metadata are on the volume",
      );
      const dataRoot = await readdir(join(`/proc/${builder.pid1}/root`, VOLUME_IN_MACHINE, DATA_ROOT_SUBDIR));
      t.notOk(dataRoot.includes("image"), "and the data-root holds no image store of its own");
      await inMachine(t, builder, ["systemctl", "stop", "docker.service", "docker.socket", "containerd.service"]);
      for (const local of CONTAINERD_MACHINE_LOCAL_STATE)
        await inMachine(t, builder, ["rm", "-rf", join(VOLUME_IN_MACHINE, CONTAINERD_ROOT_SUBDIR, local)]);
      await inMachine(t, builder, ["umount", VOLUME_IN_MACHINE]);
      t.equal(await builder.poweroff(120_000), 0, "the builder powered off");

      // Another machine takes the volume.
      const m = await time("second", () => containerdStoreMachine(t, bundle));
      await inMachine(t, m, ["mkdir", "-p", VOLUME_IN_MACHINE]);
      await inMachine(t, m, ["mount", "-o", "noatime", device, VOLUME_IN_MACHINE]);
      const dataRootOnly = await dockerOnVolume(t, m, { containerdRoot: false });
      t.notOk(
        (await dataRootOnly.images()).includes(IMAGES[0]!.tag),
        "with only the data-root on the volume, docker does not see the image " +
          "(containerd's root is /var/lib/containerd)",
      );
      const engine = await dockerOnVolume(t, m, { containerdRoot: true });
      t.ok(
        (await engine.images()).includes(IMAGES[0]!.tag),
        `with containerd's root on the volume, ${IMAGES[0]!.tag} is there without a pull`,
      );
      const ran = await m.exec(
        ["docker", "run", "--rm", "--pull=never", "--network=none", IMAGES[0]!.tag, "/bin/sh", "-c", "exit 0"],
        120_000,
      );
      t.equal(ran.exitCode, 0, `and runs${ran.exitCode === 0 ? "" : `: ${ran.stderr}`}`);
      await inMachine(t, m, ["systemctl", "stop", "docker.service", "docker.socket", "containerd.service"]);
      await inMachine(t, m, ["umount", VOLUME_IN_MACHINE]);
      t.equal(await m.poweroff(120_000), 0, "the machine powered off");
      t.comment(timingsText(timings));
    },
  );

  t.test(
    `${ENGINES["28"].name}, containerd image store through the agent: the containerd volume claimed, containerd's ` +
      `root on it, re-run, reboot, release, a second instance`,
    async (t) => {
      const timings: Record<string, number> = {};
      const time = timer(timings);
      // A pool holding one graphdriver volume (the shared golden) and one containerd volume.
      const s = await setup("28", 1, time, (line) => t.comment(line));
      const graphdriverVolume = s.poolVolumes[0]!;
      const golden = await time("containerd-golden", () => containerdGolden(t, s, s.pool));
      const [containerdVolume] = await createPoolVolumes(s.lab, golden, {
        pool: s.pool,
        imageSet: IMAGE_SET,
        count: 1,
      });
      t.equal(
        tagsOf(await s.describe(containerdVolume!))[VolumeTag.imageStore],
        "containerd",
        "the containerd pool volume is tagged with its store",
      );
      const onContainerd: Setup = { ...s, poolVolumes: [containerdVolume!] };
      const first = await bootAndRelease(t, onContainerd, "nspawn-28-containerd", timings, {
        store: "containerd",
        rerun: true,
        reboot: true,
      });
      t.equal(first, containerdVolume, "the machine claimed the containerd volume");
      const left = await s.describe(graphdriverVolume);
      t.equal(left.State, "available", "the graphdriver volume of the same pool was left alone");
      t.notOk(tagsOf(left)[VolumeTag.claimedBy], "never claimed");
      const second = await bootAndRelease(t, onContainerd, "nspawn-28-containerd-second", {}, { store: "containerd" });
      t.equal(second, containerdVolume, `the second instance took ${containerdVolume}, released by the first`);
      t.comment(timingsText(timings));
    },
  );
}
