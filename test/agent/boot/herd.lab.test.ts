/**
 * A herd boots into a throttled EC2: many real `ebs-cache-agent boot` processes start at once
 * on a pool smaller than the herd, with 20 % of EC2 requests answered RequestLimitExceeded.
 * No volume may end attached to two instances nor an instance hold two, every agent exits 0
 * (prepared) or 4 (degraded), the pool is used up, and the herd spends at most 1.5 AttachVolume
 * (handled by the emulator, throttled ones not counted) per agent.
 *
 * Why per agent and not per successful claim: agents that list the pool before any of them has
 * claimed (a herd starting together) all see every volume, and each must try at least once to
 * learn it lost; with more agents than volumes that alone is agents ÷ volumes AttachVolume per
 * claim (2.5 for 50 on 20), whatever the agent does. What the agent controls is what a loss costs
 * it afterwards: one fresh listing, and another try only at a volume still available. So the
 * herd spends at most 1.5 AttachVolume per agent, and per claim at most the floor + 0.5.
 *
 * The size is a parameter: HERD_AGENTS (default 10 a core, at most 50: 20 on CI's 2 cores) and
 * HERD_VOLUMES (default 2 agents in 5). Every agent is a node process (tsx), ~150 MB and a
 * second or two of CPU to start; bench/herd.ts runs the 50 on 20.
 */
import t from "tap";
import { ExitCode } from "../../../src/errors.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { managedVolumes } from "../../fixtures/lab/agent-process.ts";
import { POOL, startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { defaultHerdAgents, herdSummary, runHerd } from "../../fixtures/lab/herd.ts";
import { assertNothingLost } from "../../fixtures/kill/kill-matrix.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const AGENTS = Number(process.env.HERD_AGENTS ?? defaultHerdAgents());
const VOLUMES = Number(process.env.HERD_VOLUMES ?? Math.max(1, Math.round((AGENTS * 2) / 5)));
const THROTTLE = 0.2;
const MAX_ATTACH_PER_AGENT = 1.5;
if (!(Number.isInteger(AGENTS) && AGENTS > 0 && Number.isInteger(VOLUMES) && VOLUMES > 0)) {
  throw new Error(`HERD_AGENTS and HERD_VOLUMES must be positive integers (got ${AGENTS}, ${VOLUMES})`);
}

const bl = await startBootLab({ name: "test-boot-herd", poolSize: VOLUMES });
t.teardown(() => bl.close());

t.test(`${AGENTS} agents boot at once on ${VOLUMES} pool volumes with ${THROTTLE * 100} % throttling`, async (t) => {
  const f = await runHerd(bl, { agents: AGENTS, pool: POOL, volumes: VOLUMES, throttleRate: THROTTLE });
  t.comment(herdSummary(f));

  const odd = f.perAgent.filter((a) => a.exitCode !== 0 && a.exitCode !== ExitCode.degraded);
  t.same(
    odd.map((a) => `${a.instanceId} exit ${a.exitCode}: ${a.reason ?? ""}`),
    [],
    "every agent exits 0 or 4",
  );
  t.ok(
    f.perAgent.every((a) => (a.exitCode === 0) === (a.outcome === "prepared")),
    "exit 0 exactly for the prepared agents",
    { perAgent: f.perAgent.map((a) => [a.instanceId, a.exitCode, a.outcome]) },
  );
  t.same(f.doubleClaims, [], "no double claim: no volume held twice, no instance holding two");
  t.same(f.misreported, [], "each prepared agent holds the volume it reports");
  t.equal(f.claims, Math.min(AGENTS, VOLUMES), "the pool is used up: as many claims as volumes (or agents)", {
    reasons: f.perAgent.filter((a) => a.outcome !== "prepared").map((a) => a.reason),
  });
  t.equal(f.attachAccepted, f.claims, "the emulator accepted exactly one AttachVolume per claim");
  const floor = AGENTS / Math.max(1, f.claims);
  t.comment(
    `AttachVolume per claim ${f.attachPerClaim.toFixed(2)}; the floor for a herd that lists together is ` +
      `${floor.toFixed(2)}`,
  );
  const perAgent = f.attachHandled / AGENTS;
  t.ok(perAgent <= MAX_ATTACH_PER_AGENT, `AttachVolume per agent ${perAgent.toFixed(2)} ≤ ${MAX_ATTACH_PER_AGENT}`, {
    attachHandled: f.attachHandled,
    claims: f.claims,
    perAgent: f.perAgent.map((a) => `${a.instanceId}: ${a.attachCalls} attach, ${a.calls} calls, ${a.outcome ?? "?"}`),
  });

  const claimed = managedVolumes(bl.lab, VolumeTag.pool).filter((v) => v.attachedTo.length > 0);
  for (const volume of claimed) {
    t.equal(volume.tags[VolumeTag.claimedBy], volume.attachedTo[0], `${volume.volumeId}: claimed-by names its holder`);
  }
  assertNothingLost(t, bl, VolumeTag.pool);
});

t.test("the lab closes and leaves no loop device, mount or dockerd behind", async (t) => {
  t.same(await bl.close(), { rootExists: false, loopDevices: [], mounts: [], dockerds: [] });
});
