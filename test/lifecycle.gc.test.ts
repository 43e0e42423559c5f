/**
 * gc and pool on the lab, as CLI processes against the EC2 emulator: volumes of every kind;
 * only the expired managed ones go, a dry run deletes nothing, the cap holds, a never-released
 * volume is tagged to expire, snapshots and foreign volumes are never touched.
 */
import t from "tap";
import { AttachVolumeCommand, CreateSnapshotCommand, CreateVolumeCommand, DescribeSnapshotsCommand, DescribeVolumesCommand, type EC2Client } from "@aws-sdk/client-ec2";
import { run } from "../src/exec.ts";
import { writeLabConfig } from "../src/lab/agent.ts";
import { startLab } from "../src/lab/lab.ts";
import { createMemoryLogger } from "../src/log.ts";
import { VolumeTag } from "../src/tags.ts";
import { assertLabPrerequisites, pollUntil } from "./fixtures/lab-prereq.ts";

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
      TagSpecifications: [{ ResourceType: "volume", Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })) }],
    }),
  );
  return created.VolumeId!;
}

async function states(client: EC2Client): Promise<Map<string, { state: string; tags: Record<string, string> }>> {
  const out = await client.send(new DescribeVolumesCommand({}));
  return new Map((out.Volumes ?? []).map((v) => [v.VolumeId!, { state: v.State!, tags: Object.fromEntries((v.Tags ?? []).map((x) => [x.Key!, x.Value!])) }]));
}

async function cli(args: string[]) {
  const result = await run(process.execPath, ["--import", "tsx", "src/cli.ts", ...args, "--config", config], { check: false });
  return { ...result, json: args.includes("--json") ? (JSON.parse(result.stdout) as { decisions: Array<{ volumeId: string; verdict: string; done?: string }> }) : undefined };
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
await ec2.send(new AttachVolumeCommand({ VolumeId: v.attached, InstanceId: host.instance.instanceId, Device: "/dev/sdf" }));
const snapshot = (await ec2.send(new CreateSnapshotCommand({ VolumeId: v.expiredOld, TagSpecifications: [{ ResourceType: "snapshot", Tags: [{ Key: VolumeTag.managed, Value: "true" }] }] }))).SnapshotId!;

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
  t.ok(dry.json!.decisions.every((d) => d.done === undefined), "nothing done");
  t.same(await states(ec2), before, "no volume or tag changed");
  t.match(dry.stderr, /malformed/, "the malformed volume is reported");
});

t.test("gc deletes only the expired managed volumes, within the cap", async (t) => {
  const first = await cli(["gc", "--max-deletes", "1", "--json"]);
  t.equal(first.exitCode, 0, first.stderr);
  t.same(first.json!.decisions.filter((d) => d.done === "deleted").map((d) => d.volumeId), [v.expiredOld], "the oldest expiry goes first");
  t.equal(first.json!.decisions.find((d) => d.volumeId === v.expiredNew)?.verdict, "over-cap");
  const second = await cli(["gc", "--json"]);
  t.same(second.json!.decisions.filter((d) => d.done === "deleted").map((d) => d.volumeId), [v.expiredNew], "the next run takes the rest");

  const after = await states(ec2);
  t.notOk(after.has(v.expiredOld) && after.get(v.expiredOld)!.state !== "deleting", "expired volume deleted");
  for (const id of [v.kept, v.attached, v.foreign, v.malformed, v.notYet, v.neverReleased, v.fresh]) t.ok(after.has(id), `${id} is still there`);
  t.match(after.get(v.neverReleased)!.tags[VolumeTag.expiresAt] ?? "", /^\d{4}-/, "the never-released volume now expires");
  const snaps = await ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: [snapshot] }));
  t.equal(snaps.Snapshots?.length, 1, "snapshots are never touched");
  const third = await cli(["gc", "--json"]);
  t.equal(third.json!.decisions.filter((d) => d.done === "deleted").length, 0, "a third run has nothing left to delete");
});

t.test("pool shows the managed volumes as a table and as JSON", async (t) => {
  const table = await cli(["pool"]);
  t.equal(table.exitCode, 0, table.stderr);
  t.match(table.stdout, /^VOLUME\s+KIND\s+POOL\s+ZONE\s+STATE/m);
  t.match(table.stdout, new RegExp(`${v.attached}.*in-use.*${host.instance.instanceId}`));
  t.match(table.stdout, new RegExp(`${v.kept}.*never`));
  t.notMatch(table.stdout, new RegExp(v.foreign), "foreign volumes are not listed");
  const json = await run(process.execPath, ["--import", "tsx", "src/cli.ts", "pool", "--json", "--config", config]);
  const rows = (JSON.parse(json.stdout) as { volumes: Array<{ volumeId: string; claimedBy: string | null; expires: string | null }> }).volumes;
  t.equal(rows.find((r) => r.volumeId === v.attached)?.claimedBy, host.instance.instanceId);
  const bad = await cli(["pool", "--pool", "a;b"]);
  t.equal(bad.exitCode, 2, "a bad pool name is a usage error: exit 2");
  t.match(bad.stderr, /^Usage: ebs-cache-agent pool /m, "with the usage line");
});
