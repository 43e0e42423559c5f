/**
 * gc and pool on the lab, as CLI processes against the EC2 emulator: volumes of every kind;
 * only the expired managed ones go, a dry run deletes nothing, the cap holds, a never-released
 * volume is tagged to expire, snapshots and foreign volumes are never touched, a volume that
 * changed between gc's judgement and its deletion is spared, and every time is judged and written
 * in EC2's time when the host's clock is days off.
 */
import t from "tap";
import {
  AttachVolumeCommand,
  CreateSnapshotCommand,
  CreateTagsCommand,
  CreateVolumeCommand,
  DescribeSnapshotsCommand,
  DescribeVolumesCommand,
  type EC2Client,
} from "@aws-sdk/client-ec2";
import { runGc } from "../../../src/agent/gc/run.ts";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { run } from "../../../src/exec.ts";
import { writeLabConfig } from "../../../src/lab/machines/agent.ts";
import { startLab } from "../../../src/lab/lab.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { agentBundle, compileCacheEnv } from "../../fixtures/lab/agent-bundle.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const log = createMemoryLogger();
const lab = await startLab({ name: "test-gc", log });
const ec2 = lab.ec2Client();
const host = await lab.addHost();
const config = await writeLabConfig(lab, host);

const hour = 3600_000;
const iso = (offsetMs: number) => new Date(Date.now() + offsetMs).toISOString();
const managed = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "gc" };

async function volume(tags: Record<string, string>): Promise<string> {
  const created = await ec2.send(
    new CreateVolumeCommand({
      AvailabilityZone: `${lab.region}a`,
      Size: 1,
      TagSpecifications: [
        { ResourceType: "volume", Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })) },
      ],
    }),
  );
  return created.VolumeId!;
}

async function states(client: EC2Client): Promise<Map<string, { state: string; tags: Record<string, string> }>> {
  const out = await client.send(new DescribeVolumesCommand({}));
  return new Map(
    (out.Volumes ?? []).map((v) => [
      v.VolumeId!,
      { state: v.State!, tags: Object.fromEntries((v.Tags ?? []).map((x) => [x.Key!, x.Value!])) },
    ]),
  );
}

// The agent's bundle: this file starts the CLI some ten times (fixtures/lab/agent-bundle.ts).
const CLI = await agentBundle();
const CLI_ENV = await compileCacheEnv();

async function cli(args: string[]) {
  const result = await run(process.execPath, [CLI, ...args, "--config", config], { check: false, env: CLI_ENV });
  return {
    ...result,
    json: args.includes("--json")
      ? (JSON.parse(result.stdout) as {
          decisions: Array<{ volumeId: string; verdict: string; done?: string }>;
          wouldDelete: number;
          wouldTag: number;
          deleted: number;
        })
      : undefined,
  };
}

const v = {
  expiredOld: await volume({ ...managed, [VolumeTag.expiresAt]: iso(-3 * hour) }),
  expiredNew: await volume({ ...managed, [VolumeTag.expiresAt]: iso(-1 * hour) }),
  kept: await volume({ ...managed, [VolumeTag.expiresAt]: iso(-5 * hour), [VolumeTag.keep]: "true" }),
  attached: await volume({ ...managed, [VolumeTag.expiresAt]: iso(-5 * hour) }),
  foreign: await volume({ Name: "someone-elses", [VolumeTag.expiresAt]: iso(-5 * hour) }),
  malformed: await volume({ ...managed, [VolumeTag.expiresAt]: "soon" }),
  notYet: await volume({ ...managed, [VolumeTag.expiresAt]: iso(5 * hour) }),
  neverReleased: await volume({ ...managed, [VolumeTag.claimedBy]: "i-0deadbeef0000000" }),
  fresh: await volume(managed),
};
if (!(await pollUntil(async () => [...(await states(ec2)).values()].every((s) => s.state === "available")))) {
  throw new Error("the volumes never became available");
}
await ec2.send(
  new AttachVolumeCommand({ VolumeId: v.attached, InstanceId: host.instance.instanceId, Device: "/dev/sdf" }),
);
const snapshot = (
  await ec2.send(
    new CreateSnapshotCommand({
      VolumeId: v.expiredOld,
      TagSpecifications: [{ ResourceType: "snapshot", Tags: [{ Key: VolumeTag.managed, Value: "true" }] }],
    }),
  )
).SnapshotId!;

// Subtests run after this file's top level: the lab closes after the last of them.
t.teardown(() => lab.close());

t.test("gc --dry-run judges every volume and deletes nothing", async (t) => {
  const before = await states(ec2);
  const dry = await cli(["gc", "--dry-run", "--json"]);
  t.equal(dry.exitCode, 0, dry.stderr);
  const verdicts = Object.fromEntries(dry.json!.decisions.map((d) => [d.volumeId, d.verdict]));
  t.equal(verdicts[v.expiredOld], "delete");
  t.equal(verdicts[v.expiredNew], "delete");
  t.equal(verdicts[v.kept], "kept");
  t.equal(verdicts[v.attached], "in-use");
  t.equal(verdicts[v.malformed], "malformed");
  t.equal(verdicts[v.notYet], "not-expired");
  t.equal(verdicts[v.neverReleased], "tag-expiry");
  t.equal(verdicts[v.fresh], "never-claimed");
  t.notOk(v.foreign in verdicts, "a foreign volume is not even looked at");
  t.ok(
    dry.json!.decisions.every((d) => d.done === undefined),
    "nothing done",
  );
  t.same(await states(ec2), before, "no volume or tag changed");
  t.match(dry.stderr, /malformed/, "the malformed volume is reported");
  t.match(dry.json, { wouldDelete: 2, wouldTag: 1, deleted: 0 }, "--json: what it would do, and did nothing");
  const text = await cli(["gc", "--dry-run"]);
  t.match(
    text.stdout,
    /^dry run, nothing changed: would delete 2, would tag 1 to expire; 0 failed, 8 managed volumes seen$/m,
    "its last line says what it would delete",
  );
});

t.test("gc deletes only the expired managed volumes, within the cap", async (t) => {
  const first = await cli(["gc", "--max-deletes", "1", "--json"]);
  t.equal(first.exitCode, 0, first.stderr);
  t.same(
    first.json!.decisions.filter((d) => d.done === "deleted").map((d) => d.volumeId),
    [v.expiredOld],
    "the oldest expiry goes first",
  );
  t.equal(first.json!.decisions.find((d) => d.volumeId === v.expiredNew)?.verdict, "over-cap");
  const second = await cli(["gc", "--json"]);
  t.same(
    second.json!.decisions.filter((d) => d.done === "deleted").map((d) => d.volumeId),
    [v.expiredNew],
    "the next run takes the rest",
  );

  const after = await states(ec2);
  t.notOk(after.has(v.expiredOld) && after.get(v.expiredOld)!.state !== "deleting", "expired volume deleted");
  for (const id of [v.kept, v.attached, v.foreign, v.malformed, v.notYet, v.neverReleased, v.fresh])
    t.ok(after.has(id), `${id} is still there`);
  t.match(
    after.get(v.neverReleased)!.tags[VolumeTag.expiresAt] ?? "",
    /^\d{4}-/,
    "the never-released volume now expires",
  );
  const snaps = await ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: [snapshot] }));
  t.equal(snaps.Snapshots?.length, 1, "snapshots are never touched");
  const third = await cli(["gc", "--json"]);
  t.equal(
    third.json!.decisions.filter((d) => d.done === "deleted").length,
    0,
    "a third run has nothing left to delete",
  );
});

t.test("pool shows the managed volumes as a table and as JSON", async (t) => {
  const table = await cli(["pool"]);
  t.equal(table.exitCode, 0, table.stderr);
  t.match(table.stdout, /^VOLUME\s+KIND\s+POOL\s+ZONE\s+STATE/m);
  t.match(table.stdout, new RegExp(`${v.attached}.*in-use.*${host.instance.instanceId}`));
  t.notMatch(table.stdout, /EXPIRES/, "narrow by default");
  const wide = await cli(["pool", "--wide"]);
  t.match(wide.stdout, /^VOLUME\s+KIND\s+POOL\s+ZONE\s+STATE.*EXPIRES/m);
  t.match(wide.stdout, new RegExp(`${v.kept}.*never`), "--wide: the expiry");
  t.notMatch(table.stdout, new RegExp(v.foreign), "foreign volumes are not listed");
  const json = await run(process.execPath, [CLI, "pool", "--json", "--config", config], { env: CLI_ENV });
  const rows = (
    JSON.parse(json.stdout) as {
      volumes: Array<{ volumeId: string; claimedBy: string | null; expires: string | null }>;
    }
  ).volumes;
  t.equal(rows.find((r) => r.volumeId === v.attached)?.claimedBy, host.instance.instanceId);
  const bad = await cli(["pool", "--pool", "a;b"]);
  t.equal(bad.exitCode, 2, "a bad pool name is a usage error: exit 2");
  t.match(bad.stderr, /^Usage: ebs-cache-agent pool /m, "with the usage line");
});

t.test(
  "gc looks again right before each deletion: a volume kept, claimed, attached or given a new expiry since it " +
    "was judged is spared",
  async (t) => {
    const expired = {
      ...managed,
      [VolumeTag.kind]: "workspace",
      [VolumeTag.releasedAt]: iso(-30 * hour),
      [VolumeTag.expiresAt]: iso(-6 * hour),
    };
    const late = {
      kept: await volume(expired),
      claimed: await volume(expired),
      attached: await volume(expired),
      reReleased: await volume(expired),
      untouched: await volume(expired),
    };
    if (
      !(await pollUntil(async () => {
        const now = await states(ec2);
        return Object.values(late).every((id) => now.get(id)?.state === "available");
      }))
    )
      throw new Error("the volumes never became available");
    const tag = (id: string, tags: Record<string, string>) =>
      ec2.send(
        new CreateTagsCommand({ Resources: [id], Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })) }),
      );

    // gc's listing is its first DescribeVolumes; the second is its look at the first volume it deletes.
    const hold = lab.ec2.requests.addHold({ action: "DescribeVolumes", nth: 2, apply: "before" });
    const gcLog = createMemoryLogger("debug");
    const running = runGc(
      // gc from a management host: the agent's policy, credentials not of an instance (docs/operations.md).
      { cloud: createCloudVolumes({ client: lab.ec2Client(lab.credentials("agent")), pollMs: 50 }), log: gcLog },
      { dryRun: false, maxDeletes: 20, ttlHours: 24, retire: { graceHours: null, quarantineHours: 6 } },
    );
    t.ok(await lab.ec2.requests.waitForHold(hold.id, 60_000), "gc judged and is about to delete");
    // Meanwhile, on the fleet: what would keep each volume.
    await tag(late.kept, { [VolumeTag.keep]: "true" });
    await tag(late.claimed, { [VolumeTag.claimedBy]: "i-0123456789abcdef0", [VolumeTag.claimedAt]: iso(0) });
    await ec2.send(
      new AttachVolumeCommand({ VolumeId: late.attached, InstanceId: host.instance.instanceId, Device: "/dev/sdg" }),
    );
    await tag(late.reReleased, { [VolumeTag.releasedAt]: iso(0), [VolumeTag.expiresAt]: iso(24 * hour) });
    lab.ec2.requests.releaseHold(hold.id);
    const outcome = await running;

    const done = Object.fromEntries(
      Object.entries(late).map(([name, id]) => [name, outcome.decisions.find((d) => d.volumeId === id)?.done]),
    );
    t.same(
      done,
      { kept: "spared", claimed: "spared", attached: "spared", reReleased: "spared", untouched: "deleted" },
      "each changed volume spared, the unchanged one deleted",
      { decisions: outcome.decisions },
    );
    t.equal(outcome.spared, 4, "the run counts them");
    t.equal(outcome.failed, 0, "none was a failed DeleteVolume: gc did not try");
    t.equal(
      gcLog.lines.filter((line) => /^<5>gc\.spared: left alone: /.test(line)).length,
      4,
      "one notice each, saying why",
    );
    const after = await states(ec2);
    for (const name of ["kept", "claimed", "attached", "reReleased"] as const)
      t.equal(after.get(late[name])?.state === "deleting" || !after.has(late[name]), false, `${name}: still there`);
    t.ok(!after.has(late.untouched) || after.get(late.untouched)?.state === "deleting", "the unchanged one is gone");
  },
);

t.test(
  "gc judges in EC2's time: a host 3 days ahead deletes nothing EC2's time keeps and tags expiries in EC2's " +
    "time; a host 3 days behind deletes what EC2's time expired",
  async (t) => {
    // "The host's clock" moves by moving EC2's the other way: the gc process's own clock stays real.
    t.teardown(() => lab.ec2.setClockOffset(0));
    const day = 24 * hour;
    /** A time `offsetMs` from EC2's now, as a tag says it. */
    const ec2Iso = (offsetMs: number) => new Date(lab.ec2.now() + offsetMs).toISOString();
    const available = async (ids: string[]) => {
      if (
        !(await pollUntil(async () => {
          const now = await states(ec2);
          return ids.every((id) => now.get(id)?.state === "available");
        }))
      )
        throw new Error("the volumes never became available");
    };
    const gcRun = async () => {
      const run = await cli(["gc", "--max-deletes", "100", "--json"]);
      t.equal(run.exitCode, 0, run.stderr);
      return { run, verdict: (id: string) => run.json!.decisions.find((d) => d.volumeId === id) };
    };
    const gone = async (id: string) => {
      const now = (await states(ec2)).get(id);
      return now === undefined || now.state === "deleting";
    };

    lab.ec2.setClockOffset(-3 * day);
    const ahead = {
      releasedJustNow: await volume({
        ...managed,
        [VolumeTag.releasedAt]: ec2Iso(-60_000),
        [VolumeTag.expiresAt]: ec2Iso(24 * hour - 60_000),
      }),
      in60h: await volume({ ...managed, [VolumeTag.expiresAt]: ec2Iso(60 * hour) }),
      workspace23h: await volume({
        ...managed,
        [VolumeTag.kind]: "workspace",
        [VolumeTag.expiresAt]: ec2Iso(23 * hour),
      }),
      deadInstance: await volume({
        ...managed,
        [VolumeTag.claimedBy]: "i-0dead00000000beef",
        [VolumeTag.claimedAt]: ec2Iso(-2 * hour),
      }),
      expired: await volume({ ...managed, [VolumeTag.expiresAt]: ec2Iso(-hour) }),
    };
    await available(Object.values(ahead));
    const first = await gcRun();
    t.same(
      Object.fromEntries(Object.entries(ahead).map(([name, id]) => [name, first.verdict(id)?.verdict])),
      {
        releasedJustNow: "not-expired",
        in60h: "not-expired",
        workspace23h: "not-expired",
        deadInstance: "tag-expiry",
        expired: "delete",
      },
      "only what EC2's time has expired goes",
    );
    t.match(first.run.stderr, /ec2\.clock-offset: this host's clock is 3 d ahead of EC2's/, "one warning says so");
    for (const name of ["releasedJustNow", "in60h", "workspace23h", "deadInstance"] as const)
      t.notOk(await gone(ahead[name]), `${name} is still there`);
    t.ok(await gone(ahead.expired), "the expired one is gone");
    const tagged = (await states(ec2)).get(ahead.deadInstance)!.tags;
    const releasedAt = Date.parse(tagged[VolumeTag.releasedAt] ?? "");
    t.ok(Math.abs(releasedAt - lab.ec2.now()) < 10 * 60_000, "the dead instance's volume released at EC2's time", {
      releasedAt: tagged[VolumeTag.releasedAt],
      ec2: ec2Iso(0),
    });
    t.equal(Date.parse(tagged[VolumeTag.expiresAt] ?? ""), releasedAt + 24 * hour, "and expiring a TTL later");

    lab.ec2.setClockOffset(3 * day);
    const behind = {
      expiredHourAgo: await volume({ ...managed, [VolumeTag.expiresAt]: ec2Iso(-hour) }),
      in2d: await volume({ ...managed, [VolumeTag.expiresAt]: ec2Iso(2 * day) }),
    };
    await available(Object.values(behind));
    const second = await gcRun();
    t.equal(second.verdict(behind.expiredHourAgo)?.done, "deleted", "expired an hour ago in EC2's time: deleted");
    t.equal(second.verdict(behind.in2d)?.verdict, "not-expired", "expiring in two days: kept");
    t.ok(await gone(behind.expiredHourAgo), "it is gone");
    t.notOk(await gone(behind.in2d), "the other is there");
  },
);
