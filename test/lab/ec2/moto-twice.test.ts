/**
 * The agent's EC2-only paths, from one scenario, against two EC2s: the lab's emulator and moto's
 * server (which nobody on this project wrote). `pool`, `gc --dry-run`, `gc`, `boot --dry-run`,
 * `pool fill`, a boot whose claimed volume's device never appears (so it is handed back and the
 * node degrades) and `pool` again run as processes against each; what they print and the EC2
 * state after each step must be the same once ids, times and host paths are normalised, but for
 * moto's known gaps, each asserted here as a gap (docs/lab.md, "Checked against moto"): a moto
 * that closes one, or any new difference, fails this test and says which.
 *
 * moto must be on the machine (scripts/setup.sh checks it): without it this test fails, it never skips.
 */
import t, { type Test } from "tap";
import {
  AttachVolumeCommand,
  CreateVolumeCommand,
  DescribeVolumesCommand,
  DescribeVolumeStatusCommand,
  DetachVolumeCommand,
  type Volume,
} from "@aws-sdk/client-ec2";
import { VolumeTag } from "../../../src/tags.ts";
import {
  agent,
  allVolumes,
  motoVersion,
  startBackend,
  seed,
  until,
  writeConfig,
  ZONE_A,
  ZONE_B,
  type AgentRun,
  type Backend,
  type Seed,
} from "../../fixtures/lab/ec2-twice.ts";

// Fails (never skips) when the machine lacks moto.
const moto = await motoVersion();
t.comment(`moto ${moto.version} (${moto.python})`);

const backends = await Promise.all([
  startBackend("emulator", { motoSeconds: 600 }),
  startBackend("moto", { motoSeconds: 600 }),
]);
t.teardown(() => Promise.all(backends.map((b) => b.close())));

/** The scenario's steps: each an agent command, then the EC2 state it left. */
const STEPS = [
  { name: "pool", args: ["pool", "--json"] },
  { name: "gc --dry-run", args: ["gc", "--dry-run", "--json"] },
  { name: "gc", args: ["gc", "--json"] },
  { name: "boot --dry-run", args: ["boot", "--dry-run", "--json"] },
  { name: "pool fill", args: ["pool", "fill", "--json"] },
  { name: "boot, the device never appears", args: ["boot", "--no-docker", "--json"] },
  { name: "pool after", args: ["pool", "--json"] },
] as const;
type StepName = (typeof STEPS)[number]["name"];

/** One backend's run of the scenario, normalised. */
interface Run {
  backend: Backend;
  seed: Seed;
  steps: Map<StepName, { run: AgentRun; json: unknown; events: string[]; state: NormalVolume[] }>;
}

/** A volume as DescribeVolumes gives it, by role, without ids and times. */
interface NormalVolume {
  role: string;
  state: string;
  zone: string;
  size: number;
  type: string;
  iops: number | undefined;
  throughput: number | undefined;
  snapshot: string;
  attachments: string[];
  tags: Record<string, string>;
}

/** Replaces ids (by role), times and host paths in whatever the agent printed. */
function normaliser(backend: Backend, s: Seed): (text: string) => string {
  const roles = new Map<string, string>(Object.entries(s).map(([role, id]) => [id, `<${role}>`]));
  roles.set(backend.instance.instanceId, "<instance>");
  if (backend.rootVolume) roles.set(backend.rootVolume, "<root>");
  const role = (id: string) => roles.get(id) ?? (id.startsWith("vol-") ? "<new-volume>" : "<other>");
  return (text) =>
    text
      .split(backend.hostRoot)
      .join("<host>")
      // The by-id link names the volume id without its dash.
      .replace(/(?<=Elastic_Block_Store_)vol([0-9a-f]{17})\b/g, (_, hex: string) => role(`vol-${hex}`))
      .replace(/\b(?:vol|snap|i)-[0-9a-f]{8,17}\b/g, role)
      .replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z/g, "<time>")
      .replace(/ebs-cache-keeper-[0-9a-f]+/g, "<client-token>");
}

/** Drops what depends on the clock or the machine's speed, and sorts lists whose order comes from the ids. */
function stable(value: unknown): unknown {
  if (Array.isArray(value)) {
    const items = value.map(stable);
    const key = (item: unknown) => JSON.stringify(item);
    // Candidate lists are in an order drawn from the instance and volume ids; rows come sorted by id.
    return items.every((item) => typeof item === "string" && item.startsWith("<")) ||
      items.every((item) => item && typeof item === "object" && "volumeId" in item)
      ? [...items].sort((a, b) => key(a).localeCompare(key(b)))
      : items;
  }
  if (value && typeof value === "object") {
    return Object.fromEntries(
      Object.entries(value)
        .filter(([key]) => !["ms", "ageHours", "elapsedMs", "generatedAt"].includes(key))
        .map(([key, v]) => [key, stable(v)]),
    );
  }
  return value;
}

function normalVolumes(volumes: Volume[], normalise: (text: string) => string): NormalVolume[] {
  return (
    volumes
      // EC2 lists a deleted volume as `deleting` for a while (the emulator briefly, moto never): it is gone either way.
      .filter((v) => v.State !== "deleting")
      .map((v) => ({
        role: normalise(v.VolumeId!),
        state: v.State!,
        zone: v.AvailabilityZone!,
        size: v.Size!,
        type: v.VolumeType!,
        iops: v.Iops,
        throughput: v.Throughput,
        snapshot: v.SnapshotId ? normalise(v.SnapshotId) : "",
        attachments: (v.Attachments ?? []).map((a) => `${normalise(a.InstanceId!)} ${a.State}`),
        tags: Object.fromEntries(
          (v.Tags ?? []).map((x) => [x.Key!, normalise(x.Value!)]).sort(([a], [b]) => a!.localeCompare(b!)),
        ),
      }))
      .sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)))
  );
}

/**
 * Every volume once none is attaching or detaching: the agent hands a volume back with a
 * DetachVolume it does not wait for (the next boot does not need it), and EC2 takes a moment.
 */
async function settledVolumes(backend: Backend): Promise<Volume[]> {
  const moving = (volumes: Volume[]) =>
    volumes.some((v) => (v.Attachments ?? []).some((a) => a.State === "attaching" || a.State === "detaching"));
  const deadline = Date.now() + 30_000;
  let volumes = await allVolumes(backend.ec2);
  while (moving(volumes) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    volumes = await allVolumes(backend.ec2);
  }
  return volumes;
}

async function runScenario(backend: Backend): Promise<Run> {
  const s = await seed(backend, Date.now());
  const normalise = normaliser(backend, s);
  const config = await writeConfig(backend);
  const steps: Run["steps"] = new Map();
  for (const step of STEPS) {
    const run = await agent(config, [...step.args]);
    const json = run.stdout.trim().startsWith("{") ? stable(JSON.parse(normalise(run.stdout))) : undefined;
    // Progress lines are paced by the clock (how long a wait lasted), not by what the agent did: left out.
    const events = [...run.stderr.matchAll(/^<(\d)>([a-z]+\.[a-z0-9-]+):/gm)]
      .map((m) => `<${m[1]}>${m[2]}`)
      .filter((event) => !event.endsWith(".progress"));
    steps.set(step.name, { run, json, events, state: normalVolumes(await settledVolumes(backend), normalise) });
  }
  return { backend, seed: s, steps };
}

const [emulator, motoRun] = (await Promise.all(backends.map(runScenario))) as [Run, Run];
const step = (r: Run, name: StepName) => r.steps.get(name)!;

/**
 * The volume a boot claims first: the dry run's first candidate. The order is drawn from the
 * instance and volume ids (so herds spread), which differ between the backends: the boot's
 * output is compared with that volume named `<claimed>` on both.
 */
function firstCandidate(r: Run): string {
  const plan = JSON.parse(step(r, "boot --dry-run").run.stdout) as { plan: { selection: { candidates: string[] } } };
  const first = plan.plan.selection.candidates[0];
  if (!first) throw new Error(`${r.backend.name}: the dry run planned no candidate`);
  return normaliser(r.backend, r.seed)(first);
}
/** The boot's output with zone a's pool volumes named by what the boot did with them. */
function claimedAs(r: Run, json: unknown): unknown {
  const claimed = firstCandidate(r);
  const other = claimed === "<poolA1>" ? "<poolA2>" : "<poolA1>";
  return stable(JSON.parse(JSON.stringify(json).split(claimed).join("<claimed>").split(other).join("<not-claimed>")));
}

/**
 * moto's known gaps as they show in the scenario: each one checked to be there (so a moto that
 * closes it fails here, by name) and then taken out, so that what remains must be equal.
 */
const GAPS = {
  /**
   * Not moto's gap but the emulator's: its instances have no root volume; moto's RunInstances makes one, as EC2 does.
   */
  rootVolume(t: Test, e: NormalVolume[], m: NormalVolume[]): NormalVolume[] {
    t.same(
      m.filter((v) => v.role === "<root>").map((v) => [v.state, v.attachments, v.tags]),
      [["in-use", ["<instance> attached"], {}]],
      "moto's instance has its root volume, untagged, never touched by the agent",
    );
    t.notOk(
      e.some((v) => v.role === "<root>"),
      "the emulator's instance has none",
    );
    return m.filter((v) => v.role !== "<root>");
  },
  /** moto reports no Throughput for a gp3 volume created without one; EC2 (and the emulator) say 125. */
  gp3Throughput(t: Test, e: NormalVolume[], m: NormalVolume[]): NormalVolume[] {
    const gp3 = m.filter((v) => v.type === "gp3");
    t.ok(
      gp3.length > 0 && gp3.every((v) => v.throughput === undefined),
      "gap: moto gives no Throughput for gp3 volumes",
    );
    t.ok(
      e.filter((v) => v.type === "gp3").every((v) => v.throughput === 125),
      "the emulator gives EC2's gp3 default of 125 MiB/s",
    );
    return m.map((v) => (v.type === "gp3" ? { ...v, throughput: 125 } : v));
  },
  /** moto has no DescribeVolumeStatus: the keeper never sees an initialization, so it tags none `initialized`. */
  noInitializedTags(t: Test, e: NormalVolume[], m: NormalVolume[]): NormalVolume[] {
    t.notOk(
      m.some((v) => VolumeTag.initialized in v.tags),
      "gap: no volume tagged initialized on moto",
    );
    t.ok(
      e.some((v) => VolumeTag.initialized in v.tags),
      "the emulator's pool volumes are tagged initialized",
    );
    return e.map((v) => {
      const { [VolumeTag.initialized]: _dropped, ...tags } = v.tags;
      return { ...v, tags };
    });
  },
};

/** pool --json: moto's null throughput for gp3 (the gap above) as the report shows it. */
function poolReportGap(t: Test, e: unknown, m: unknown): unknown {
  const rows = (r: unknown) =>
    (r as { volumes: Array<{ volumeType: string; throughputMiBps: number | null }> }).volumes;
  t.ok(
    rows(m).every((v) => v.volumeType !== "gp3" || v.throughputMiBps === null),
    "gap: pool shows no throughput for moto's gp3 volumes",
  );
  t.ok(
    rows(e).every((v) => v.volumeType !== "gp3" || v.throughputMiBps === 125),
    "and 125 MiB/s for the emulator's",
  );
  return {
    ...(m as object),
    volumes: rows(m).map((v) => (v.volumeType === "gp3" ? { ...v, throughputMiBps: 125 } : v)),
  };
}

t.test(`moto ${moto.version} is there, as scripts/moto-server.sh finds it`, async (t) => {
  t.match(moto.version, /^\d+\.\d+\.\d+/);
});

for (const { name } of STEPS) {
  t.test(`${name}: the same on both EC2s`, async (t) => {
    const e = step(emulator, name);
    const m = step(motoRun, name);
    // The DescribeVolumeStatus gap: on moto every status read of pool fill fails, and each counts as
    // a failed tag-initialized (exit 1 for the timer); on EC2 the same run succeeds.
    const motoExit = name === "pool fill" ? 1 : e.run.exitCode;
    t.equal(m.run.exitCode, motoExit, `exit code ${e.run.exitCode} on the emulator, ${motoExit} on moto`, {
      emulator: e.run.stderr,
      moto: m.run.stderr,
    });
    if (name === "pool fill") t.equal(e.run.exitCode, 0, "pool fill succeeds on the emulator");
    let motoJson = m.json;
    let emulatorJson = e.json;
    let motoEvents = m.events;
    if (name === "pool" || name === "pool after") motoJson = poolReportGap(t, emulatorJson, motoJson);
    if (name === "boot, the device never appears")
      [emulatorJson, motoJson] = [claimedAs(emulator, emulatorJson), claimedAs(motoRun, motoJson)];
    if (name === "pool fill") {
      // One pool configured: its outcome, the only one under `pools`.
      const pools = (o: unknown) => (o as { pools: unknown[] }).pools;
      t.same([pools(emulatorJson).length, pools(motoJson).length], [1, 1], "one outcome under pools on both");
      [emulatorJson, motoJson] = [pools(emulatorJson)[0], pools(motoJson)[0]];
      // The DescribeVolumeStatus gap: each status read fails, which costs only that volume's
      // initialized tag (a warning and a failure each); the keeper still creates and trims.
      const unread = (o: unknown) => (o as { unread: Array<{ volumeId: string }> }).unread;
      t.equal(
        m.events.filter((ev) => ev === "<4>keeper.status-unread").length,
        3,
        "gap: moto has no DescribeVolumeStatus; a warning per pool volume",
        { stderr: m.run.stderr },
      );
      t.equal(unread(motoJson).length, 3, "and each reported unread");
      t.same(unread(emulatorJson), [], "the emulator answers every status read");
      motoEvents = m.events.filter((ev) => ev !== "<4>keeper.status-unread");
      motoJson = { ...(motoJson as object), unread: [], failed: 0 };
      const withoutTagging = (o: unknown) => {
        const outcome = o as { plan: { steps: Array<{ step: string }> }; results: Array<{ step: string }> };
        return {
          ...outcome,
          plan: { ...outcome.plan, steps: outcome.plan.steps.filter((s) => s.step !== "tag-initialized") },
          results: outcome.results.filter((s) => s.step !== "tag-initialized"),
        };
      };
      const tagged = (o: unknown) =>
        (o as { results: Array<{ step: string; done: string }> }).results.filter(
          (r) => r.step === "tag-initialized" && r.done === "tagged",
        ).length;
      t.equal(tagged(emulatorJson), 3, "the emulator's three pool volumes are tagged initialized");
      t.equal(tagged(motoJson), 0, "none on moto");
      emulatorJson = withoutTagging(emulatorJson);
      t.equal(e.events.filter((ev) => ev === "<6>keeper.initialized").length, 3);
    }
    t.same(motoJson, emulatorJson, "what the agent printed, ids and times normalised");
    t.same(
      motoEvents,
      e.events.filter((ev) => ev !== "<6>keeper.initialized"),
      "the same log events, in the same order",
    );

    const motoState = GAPS.gp3Throughput(t, e.state, GAPS.rootVolume(t, e.state, m.state));
    let emulatorState = e.state;
    if (STEPS.findIndex((s) => s.name === name) >= STEPS.findIndex((s) => s.name === "pool fill"))
      emulatorState = GAPS.noInitializedTags(t, e.state, motoState);
    t.same(motoState, emulatorState, "EC2's volumes and tags afterwards");
  });
}

t.test("the claim whose device never appears: handed back, available, with its tags as before, on both", async (t) => {
  for (const r of [emulator, motoRun]) {
    const boot = step(r, "boot, the device never appears");
    t.equal(boot.run.exitCode, 4, `${r.backend.name}: degraded (exit 4)`);
    const printed = boot.json as { result: { outcome: string; reason: string } };
    t.equal(printed.result.outcome, "degraded", `${r.backend.name}: degraded`);
    const claimed = firstCandidate(r);
    t.match(claimed, /^<poolA\d>$/, `${r.backend.name}: the first candidate is a pool volume of the instance's zone`);
    t.ok(
      printed.result.reason.startsWith(`the device of volume ${claimed} did not appear`),
      `${r.backend.name}: the first candidate was claimed; its device never appeared`,
      { reason: printed.result.reason },
    );
    const before = step(r, "pool fill").state;
    const after = boot.state;
    t.same(
      after,
      before,
      `${r.backend.name}: every volume as before the boot: the claimed one available again, its claim tags ` +
        `removed, no last-error`,
    );
    t.notOk(
      after.some(
        (v) =>
          (v.role !== "<root>" && v.attachments.length > 0) ||
          VolumeTag.claimedBy in v.tags ||
          VolumeTag.lastError in v.tags,
      ),
      `${r.backend.name}: nothing attached, claimed or quarantined`,
    );
  }
});

/** An SDK call's error name, or "ok". */
async function outcome(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return "ok";
  } catch (error) {
    return (error as { name?: string }).name ?? String(error);
  }
}

/** Probes of moto's gaps by direct SDK calls: EC2's behaviour on the emulator, the gap on moto. */
async function probe(backend: Backend) {
  const { ec2, instance } = backend;
  const create = (zone: string, token?: string) =>
    ec2
      .send(
        new CreateVolumeCommand({
          AvailabilityZone: zone,
          Size: 1,
          VolumeType: "gp3",
          ...(token ? { ClientToken: token } : {}),
        }),
      )
      .then((o) => o.VolumeId!);
  const token = `twice-${backend.name}-${Date.now()}`;
  const first = await create(ZONE_A, token);
  const again = await create(ZONE_A, token);
  const other = await create(ZONE_B);
  await until(ec2, [first, again, other], "available");
  // More than 5 volumes exist by now: a page of 5 must say there is more.
  const page = await ec2.send(new DescribeVolumesCommand({ MaxResults: 5 }));
  const paged = page.Volumes?.length === 5 && page.NextToken !== undefined;
  const volumeStatus = await outcome(ec2.send(new DescribeVolumeStatusCommand({ VolumeIds: [first] })));
  const crossZone = await outcome(
    ec2.send(new AttachVolumeCommand({ VolumeId: other, InstanceId: instance.instanceId, Device: "/dev/sdg" })),
  );
  await ec2.send(new AttachVolumeCommand({ VolumeId: first, InstanceId: instance.instanceId, Device: "/dev/sdf" }));
  const stateRightAfterAttach = (await allVolumes(ec2)).find((v) => v.VolumeId === first)?.Attachments?.[0]?.State;
  const secondAttach = await outcome(
    ec2.send(new AttachVolumeCommand({ VolumeId: first, InstanceId: instance.instanceId, Device: "/dev/sdh" })),
  );
  return { sameTokenSameVolume: first === again, paged, volumeStatus, crossZone, secondAttach, stateRightAfterAttach };
}

t.test(
  "moto's known gaps, probed: each still there (else docs/lab.md's table and this test must change)",
  async (t) => {
    const [e, m] = await Promise.all([probe(emulator.backend), probe(motoRun.backend)]);
    t.same(
      {
        sameTokenSameVolume: e.sameTokenSameVolume,
        paged: e.paged,
        volumeStatus: e.volumeStatus,
        crossZone: e.crossZone,
        secondAttach: e.secondAttach,
      },
      {
        sameTokenSameVolume: true,
        paged: true,
        volumeStatus: "ok",
        crossZone: "InvalidVolume.ZoneMismatch",
        secondAttach: "VolumeInUse",
      },
      "the emulator behaves as EC2 documents",
    );
    const gaps: Array<[string, boolean]> = [
      ["ClientToken: CreateVolume with a token already used makes a second volume", m.sameTokenSameVolume === false],
      ["DescribeVolumes ignores MaxResults: every volume in one answer, no NextToken", m.paged === false],
      ["DescribeVolumeStatus is not implemented (a 500 the SDK cannot parse)", m.volumeStatus !== "ok"],
      ["AttachVolume attaches a volume of another zone", m.crossZone === "ok"],
      ["no attach lock: AttachVolume of a volume already attached succeeds", m.secondAttach === "ok"],
      ["no attachment transitions: attached as soon as AttachVolume answered", m.stateRightAfterAttach === "attached"],
    ];
    for (const [gap, stillThere] of gaps) t.ok(stillThere, `moto ${moto.version} gap: ${gap}`, { probe: m });
    // Leave nothing attached (the backends close anyway; this keeps a failure's state readable).
    for (const r of [emulator, motoRun]) {
      for (const v of await allVolumes(r.backend.ec2)) {
        if (v.State === "in-use")
          await r.backend.ec2.send(new DetachVolumeCommand({ VolumeId: v.VolumeId! })).catch(() => undefined);
      }
    }
  },
);
