/**
 * The `nspawn` part of bench/boot-latency.ts: launch → joined inside a real systemd, before and after phase 2
 * told systemd it has started once docker is final (Type=notify).
 *
 * Each boot is an engine machine (Debian 12, docker 20.10) with the agent installed by scripts/install.sh, a
 * `cloud-final.service` ordered as Debian orders it (After=multi-user.target) running osparc's join against a
 * manager outside the machine (src/lab/machines/nspawn-join.ts), and the lab's EC2 and IMDS at zero delay. The
 * times come from the machine's journal, from the moment its systemd was started (the stand-in for EC2's
 * LaunchTime; EC2's own start is not in them). `before` is the same machine with the phase 2 unit as it was
 * (a drop-in: Type=oneshot, no notify socket): multi-user.target, and so the join, waited for the whole run.
 * The two alternate, so that the machine's load falls on both alike.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import type { Lab } from "../src/lab/lab.ts";
import { CLOUD_FINAL_UNIT, joinTimeline, joinUnitFiles, type JoinTimeline } from "../src/lab/machines/nspawn-join.ts";
import { READY_UNIT, readyRunEnded, startEngineHost } from "../src/lab/machines/nspawn-host.ts";
import { ENGINES, CACHE_BASE, cachedRootfs, nspawnProblems } from "../src/lab/machines/nspawn-rootfs.ts";
import { buildBundle, type Machine } from "../src/lab/machines/nspawn.ts";
import { jobDone } from "../src/lab/machines/nspawn-docker.ts";
import { startOsparcSwarm } from "../src/lab/machines/osparc-swarm.ts";
import { percentile } from "./sampling.ts";

export type Variant = "before" | "after";

/** One machine's boot. */
export interface NspawnJoinBoot extends Timeline {
  variant: Variant;
  error?: string;
}

/**
 * The journal's timeline and, measured from docker's start, what phase 2 adds before the join and before `ready`:
 * free of what the machine's load does to phase 1 and docker's own start, which differ from boot to boot.
 */
export interface Timeline extends JoinTimeline {
  joinedAfterDocker?: number;
  readyLabelAfterDocker?: number;
}

function withDerived(timeline: JoinTimeline): Timeline {
  const since = (at: number | undefined) =>
    at === undefined || timeline.dockerStarted === undefined ? undefined : at - timeline.dockerStarted;
  const derived: Timeline = { ...timeline };
  const joined = since(timeline.joined);
  const ready = since(timeline.readyLabel);
  if (joined !== undefined) derived.joinedAfterDocker = joined;
  if (ready !== undefined) derived.readyLabelAfterDocker = ready;
  return derived;
}

/** The phase 2 unit as it was: a oneshot, so multi-user.target (and cloud-final after it) waits for its end. */
const BEFORE_DROP_IN =
  "# bench: phase 2 as before (a oneshot: started at the end of its run)\n[Service]\nType=oneshot\nNotifyAccess=none\n";

/** Boots `boots` machines of each variant, alternating; the lab has a golden snapshot with `pool` volumes for them. */
export async function nspawnJoinPart(
  lab: Lab,
  options: { boots: number; pool: string; imageSet: string; say: (line: string) => void },
): Promise<{ boots: NspawnJoinBoot[]; summary: Record<Variant, Record<keyof Timeline, number | undefined>> }> {
  const problems = await nspawnProblems();
  if (problems.length > 0) throw new Error(`the nspawn part cannot run here: ${problems.join("; ")}`);
  const rootfs = await cachedRootfs(ENGINES["20.10"], options.say);
  const work = await mkdtemp(join(CACHE_BASE, "bench-join-"));
  const boots: NspawnJoinBoot[] = [];
  const swarm = await startOsparcSwarm(join(work, "swarm"));
  // The machines share this network namespace: the link, its address, their docker's gateway bridge are this run's.
  let unlink: (() => Promise<void>) | undefined;
  try {
    unlink = await swarm.linkHere("ebsbench");
    const bundle = await buildBundle(join(work, "bundle"));
    const userData = joinUnitFiles(await swarm.joinTarget());
    for (let i = 0; i < options.boots * 2; i++) {
      const variant: Variant = i % 2 === 0 ? "before" : "after";
      const boot = await oneBoot(lab, { rootfs: rootfs.dir, bundle, variant, userData, ...options, index: i });
      boots.push(boot);
      options.say(
        boot.error
          ? `  ${variant} ${Math.floor(i / 2) + 1} FAILED: ${boot.error}`
          : `  ${variant} ${Math.floor(i / 2) + 1}: docker ${s(boot.dockerStarted)} s, phase 2 started ` +
              `${s(boot.readyUnitStarted)} s, joined ${s(boot.joined)} s, ` +
              `ready label ${s(boot.readyLabel)} s, phase 2 ` +
              `done ${s(boot.agentDone)} s; joined ${s(boot.joinedAfterDocker)} s after docker`,
      );
    }
  } finally {
    await unlink?.();
    await swarm.stop();
    await rm(work, { recursive: true, force: true });
  }
  const summary = {} as Record<Variant, Record<keyof Timeline, number | undefined>>;
  for (const variant of ["before", "after"] as const) {
    const ok = boots.filter((b) => b.variant === variant && !b.error);
    const p50 = (key: keyof Timeline) =>
      percentile(
        ok.map((b) => b[key]).filter((v): v is number => v !== undefined),
        50,
      );
    summary[variant] = {
      dockerStarted: p50("dockerStarted"),
      readyUnitStarted: p50("readyUnitStarted"),
      joined: p50("joined"),
      readyLabel: p50("readyLabel"),
      agentDone: p50("agentDone"),
      joinedAfterDocker: p50("joinedAfterDocker"),
      readyLabelAfterDocker: p50("readyLabelAfterDocker"),
    };
  }
  return { boots, summary };
}

async function oneBoot(
  lab: Lab,
  o: {
    rootfs: string;
    bundle: string;
    variant: Variant;
    userData: ReturnType<typeof joinUnitFiles>;
    pool: string;
    imageSet: string;
    index: number;
  },
): Promise<NspawnJoinBoot> {
  let machine: Machine | undefined;
  try {
    const { machine: m, launchedAt } = await startEngineHost(
      lab,
      {
        rootfs: o.rootfs,
        bundle: o.bundle,
        store: "graphdriver",
        name: `bench-join-${o.index}`,
        overrides: { pool: o.pool, imageSet: o.imageSet },
        machine: {
          files: o.userData.files,
          wants: o.userData.wants,
          ...(o.variant === "before" ? { dropIns: { [READY_UNIT]: BEFORE_DROP_IN } } : {}),
        },
      },
      (booted) => (machine = booted),
    );
    const journal = await m.waitForJournal(
      (entries) => (readyRunEnded(entries) && jobDone(entries, CLOUD_FINAL_UNIT, "start") ? entries : undefined),
      300_000,
      `the end of ${READY_UNIT} and of ${CLOUD_FINAL_UNIT}`,
    );
    const joinDone = jobDone(journal, CLOUD_FINAL_UNIT, "start");
    if (joinDone?.jobResult !== "done") throw new Error(`${CLOUD_FINAL_UNIT} ended ${joinDone?.jobResult}`);
    return { variant: o.variant, ...withDerived(joinTimeline(journal, launchedAt, READY_UNIT)) };
  } catch (error) {
    return { variant: o.variant, error: String(error) };
  } finally {
    await machine?.destroy();
  }
}

const s = (value: number | undefined) => (value === undefined ? "-" : (value / 1000).toFixed(2));
