/**
 * osparc's swarm join inside an engine machine, ordered as Debian orders it: a `cloud-final.service`
 * (cloud-init's unit, which runs osparc's user data) `After=multi-user.target`, running the join of
 * osparc's start script (`AS/utils/cluster_scaling.py` `ec2_startup_script`: `docker swarm join
 * --availability=drain …`), against a manager outside the machine (osparc-swarm.ts). It carries the
 * real unit's name, so the agent's own ordering on it (`Before=cloud-final.service`) applies too.
 *
 * And the timeline of one boot from the machine's journal: from the machine's start (the stand-in for
 * EC2's LaunchTime) to the node in the swarm, and where the agent's phases fall in between.
 */
import type { JournalEntry } from "./nspawn-journal.ts";
import type { HereJoin } from "./osparc-swarm.ts";

export const CLOUD_FINAL_UNIT = "cloud-final.service";
const JOIN_SCRIPT = "/usr/local/lib/ebs-cache-lab/user-data.sh";
/** What docker's CLI prints on a join. */
export const JOINED_LINE = /This node joined a swarm as a worker/;

/** The files and the enabled unit of the join (MachineSetup's `files` and `wants`). */
export function joinUnitFiles(target: { token: string; address: string; here?: HereJoin }): {
  files: Record<string, { text: string; mode?: number }>;
  wants: string[];
} {
  const unit = [
    "# ebs-cache lab (src/lab/machines/nspawn-join.ts): Debian's cloud-final.service, running osparc's join.",
    "[Unit]",
    "Description=ebs-cache lab: cloud-init's final stage (osparc's user data: the swarm join)",
    "After=network-online.target multi-user.target",
    "Wants=network-online.target",
    "",
    "[Service]",
    "Type=oneshot",
    `ExecStart=/bin/sh ${JOIN_SCRIPT}`,
    "RemainAfterExit=yes",
    "TimeoutSec=0",
    "StandardOutput=journal",
    "",
  ].join("\n");
  // The machine shares the lab machine's network namespace: its docker listens on the run's own
  // address and bridges its gateway under the run's name (osparc-swarm.ts), so runs do not collide.
  const here = target.here;
  const gateway = here
    ? [
        "# ebs-cache lab: docker_gwbridge under this run's bridge name and subnet (the namespace is shared).",
        `docker network create --driver bridge --subnet ${here.gatewayBridge.subnet} ` +
          `--opt com.docker.network.bridge.name=${here.gatewayBridge.name} ` +
          "--opt com.docker.network.bridge.enable_icc=false " +
          "--opt com.docker.network.bridge.enable_ip_masquerade=true docker_gwbridge",
      ]
    : [];
  const listen = here ? ` --listen-addr ${here.listenAddress} --advertise-addr ${here.advertiseAddress}` : "";
  const script = [
    "#!/bin/sh",
    "# osparc's cold-start user data, its join (the pulls after it are left out).",
    "set -e",
    ...gateway,
    `docker swarm join --availability=drain${listen} --token ${target.token} ${target.address}`,
    "",
  ].join("\n");
  return {
    files: {
      [`/etc/systemd/system/${CLOUD_FINAL_UNIT}`]: { text: unit },
      [JOIN_SCRIPT]: { text: script, mode: 0o755 },
    },
    wants: [CLOUD_FINAL_UNIT],
  };
}

/**
 * A sample that cannot end before the join has (at most 60 s): fio, the first on the units' PATH, waits
 * for cloud-final.service to be done and then runs. The lab's loop devices read fast, a cold EBS volume
 * does not; with this, the order of the join and the sample's end does not depend on the machine's speed.
 */
export function sampleAfterJoinFiles(): Record<string, { text: string; mode?: number }> {
  const wrapper = [
    "#!/bin/sh",
    "# ebs-cache lab (src/lab/machines/nspawn-join.ts): fio once osparc's join is done.",
    'case " $* " in *" --version "*) exec /usr/bin/fio "$@" ;; esac',
    "i=0",
    "while [ $i -lt 600 ]; do",
    `  systemctl is-active --quiet ${CLOUD_FINAL_UNIT} && break`,
    "  sleep 0.1",
    "  i=$((i + 1))",
    "done",
    'exec /usr/bin/fio "$@"',
    "",
  ].join("\n");
  return { "/usr/local/bin/fio": { text: wrapper, mode: 0o755 } };
}

/** Where one boot's events fall, in ms from the machine's start; undefined: not in the journal. */
export interface JoinTimeline {
  /** docker.service started (on the data-root phase 1 set). */
  dockerStarted?: number;
  /** The agent's phase 2 unit started: READY=1 (Type=notify), or its end (a oneshot). */
  readyUnitStarted?: number;
  /** osparc's join done: the node is in the swarm. */
  joined?: number;
  /** The agent published `ready` (boot.ready). */
  readyLabel?: number;
  /** The agent's phase 2 ended (boot.done). */
  agentDone?: number;
}

/** The timeline of the boot in `entries`, from `launchedAtMs` (epoch ms, the machine's start). */
export function joinTimeline(entries: JournalEntry[], launchedAtMs: number, readyUnit: string): JoinTimeline {
  const at = (match: (e: JournalEntry) => boolean) => {
    const entry = entries.find(match);
    return entry ? entry.realtimeUs / 1000 - launchedAtMs : undefined;
  };
  const jobDone = (unit: string) => (e: JournalEntry) =>
    e.identifier === "systemd" && e.unit === unit && e.jobType === "start" && e.jobResult !== undefined;
  const agent = (event: string) => (e: JournalEntry) =>
    e.identifier === "ebs-cache-agent" && e.systemdUnit === readyUnit && e.message.startsWith(`${event}:`);
  const timeline: JoinTimeline = {};
  const set = (key: keyof JoinTimeline, value: number | undefined) => {
    if (value !== undefined) timeline[key] = value;
  };
  set("dockerStarted", at(jobDone("docker.service")));
  set("readyUnitStarted", at(jobDone(readyUnit)));
  set(
    "joined",
    at((e) => e.systemdUnit === CLOUD_FINAL_UNIT && JOINED_LINE.test(e.message)),
  );
  set("readyLabel", at(agent("boot.ready")));
  set("agentDone", at(agent("boot.done")));
  return timeline;
}
