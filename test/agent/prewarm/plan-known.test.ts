/**
 * The verdict EBS already gives: no sample where the volume is known cold (EBS's lazy
 * initialization under 100 %, or created from a snapshot minutes ago), and no sample before an
 * initialization of such a volume.
 */
import t from "tap";
import {
  planPrewarm,
  DEFAULT_PREWARM,
  FRESH_FROM_SNAPSHOT_MINUTES,
  headStartAtMount,
  mayReadFromMount,
  knownCold,
  planAfterSample,
  type PrewarmSettings,
} from "../../../src/agent/prewarm/plan.ts";
import { VolumeTag } from "../../../src/tags.ts";

const now = new Date("2026-12-01T12:00:00Z");
const minutesAgo = (m: number) => new Date(now.getTime() - m * 60_000);
const with_ = (over: Partial<PrewarmSettings>): PrewarmSettings => ({ ...DEFAULT_PREWARM, ...over });
const fromSnapshot = { volumeId: "vol-1", snapshotId: "snap-1", tags: {} };

t.test("check (the default): known cold is warmed by need, without a sample", async (t) => {
  t.match(
    planPrewarm(DEFAULT_PREWARM, { volume: fromSnapshot, status: { type: "default", progress: 3 }, now }),
    { action: "initialize", mode: "files", background: true, known: "cold", reason: /default initialization at 3 %/ },
    "EBS's lazy initialization under 100 %",
  );
  t.match(
    planPrewarm(DEFAULT_PREWARM, { volume: { ...fromSnapshot, createTime: minutesAgo(2) }, now }),
    { action: "initialize", mode: "files", known: "cold", reason: /created from snap-1 2 min ago/ },
    "created from a snapshot minutes ago",
  );
  t.match(
    planPrewarm(with_({ background: false }), { volume: { ...fromSnapshot, createTime: minutesAgo(2) }, now }),
    { action: "initialize", mode: "files", background: false },
    "prewarm.background decides where the reads run, as for `files`",
  );
  t.match(
    planPrewarm(DEFAULT_PREWARM, {
      volume: { ...fromSnapshot, createTime: minutesAgo(FRESH_FROM_SNAPSHOT_MINUTES + 1) },
      now,
    }),
    { action: "check" },
    "an older volume: only a sample tells",
  );
  t.match(
    planPrewarm(DEFAULT_PREWARM, { volume: fromSnapshot, status: { type: "default", progress: 100 }, now }),
    { action: "check" },
    "100 % of a lazy initialization is not taken as warm (EC2 says 100 where it tracks nothing)",
  );
  t.match(
    planPrewarm(DEFAULT_PREWARM, {
      volume: { ...fromSnapshot, createTime: minutesAgo(1), tags: { [VolumeTag.initialized]: "x" } },
      now,
    }),
    { action: "skip", verdict: "warm" },
    "the initialized tag wins",
  );
  t.match(
    planPrewarm(with_({ strategy: "off" }), { volume: { ...fromSnapshot, createTime: minutesAgo(1) }, now }),
    { action: "skip", verdict: "unknown" },
    "off reads nothing and says nothing",
  );
});

t.test("initialize: a known-cold volume carries its verdict, so no sample before the reads", async (t) => {
  t.match(planPrewarm(with_({ strategy: "files" }), { volume: { ...fromSnapshot, createTime: minutesAgo(5) }, now }), {
    action: "initialize",
    mode: "files",
    known: "cold",
  });
  const unknown = planPrewarm(with_({ strategy: "files" }), {
    volume: { ...fromSnapshot, createTime: minutesAgo(600) },
    now,
  });
  t.equal(unknown.action, "initialize");
  t.notOk("known" in unknown, "an old volume is sampled first");
});

t.test("knownCold edge cases", async (t) => {
  t.equal(
    knownCold({ ...fromSnapshot, createTime: minutesAgo(1) }, { type: "default", progress: 100 }, now),
    undefined,
    "EC2's status, when given, decides over the creation time",
  );
  t.equal(
    knownCold({ ...fromSnapshot, createTime: minutesAgo(-5) }, undefined, now),
    undefined,
    "a clock ahead of ours says nothing",
  );
  t.match(
    knownCold({ ...fromSnapshot, createTime: new Date(now.getTime() + 800) }, undefined, now),
    /created from snap-1 0 min ago/,
    "created 0.8 s ahead of EC2's time as estimated from whole-second Date headers: just created, cold",
  );
  t.equal(knownCold(fromSnapshot, undefined, now), undefined, "no creation time, no status");
  t.match(
    knownCold(fromSnapshot, { type: "provisioned-rate", progress: 40 }, now),
    /provisioned-rate initialization at 40 %/,
  );
});

t.test("a volume a sample found cold is warmed by need as one EBS says is cold", async (t) => {
  const check = planPrewarm(DEFAULT_PREWARM, { volume: fromSnapshot, now });
  t.match(check, { action: "check" }, "EBS says nothing: sampled");
  t.match(
    planAfterSample(DEFAULT_PREWARM, check, "cold"),
    { action: "initialize", mode: "files", background: true, known: "cold" },
    "the sample's cold: the files initialization by need, in the background",
  );
  t.equal(planAfterSample(DEFAULT_PREWARM, check, "warm"), undefined, "warm: the verdict is all");
  t.equal(planAfterSample(DEFAULT_PREWARM, check, "unknown"), undefined, "a failed sample reads nothing");
  t.equal(
    planAfterSample(
      with_({ strategy: "files" }),
      { action: "initialize", mode: "files", background: true, reason: "" },
      "cold",
    ),
    undefined,
    "a strategy that reads already decides nothing more",
  );
  t.match(
    planPrewarm(DEFAULT_PREWARM, { volume: fromSnapshot, now, sampled: "cold" }),
    { action: "initialize", mode: "files", known: "cold", reason: /sample found it cold/ },
    "the background run takes the boot's sample (the state file's verdict): no second sample",
  );
  t.match(
    planPrewarm(DEFAULT_PREWARM, { volume: fromSnapshot, now, sampled: "warm" }),
    { action: "check" },
    "an earlier warm verdict is sampled again",
  );
  t.match(
    planPrewarm(DEFAULT_PREWARM, {
      volume: { ...fromSnapshot, tags: { [VolumeTag.initialized]: "x" } },
      now,
      sampled: "cold",
    }),
    { action: "skip", verdict: "warm" },
    "the tag wins over an old verdict",
  );
});

t.test("the reads begin at the mount only for a volume known cold, warmed in the background", async (t) => {
  const cold = planPrewarm(DEFAULT_PREWARM, { volume: fromSnapshot, status: { type: "default", progress: 3 }, now });
  t.ok(headStartAtMount(cold), "known cold, background: from the mount on");
  t.notOk(headStartAtMount(planPrewarm(DEFAULT_PREWARM, { volume: fromSnapshot, now })), "a sample first: not");
  t.notOk(
    headStartAtMount(
      planPrewarm(with_({ background: false }), {
        volume: fromSnapshot,
        status: { type: "default", progress: 3 },
        now,
      }),
    ),
    "inline: the step reads it whole, before ready",
  );
  t.notOk(
    headStartAtMount(planPrewarm(with_({ strategy: "files" }), { volume: fromSnapshot, now })),
    "files with a sample to take first: not",
  );
});

t.test(
  "mayReadFromMount: the first phase begins a run for a volume that may be cold, with a pre-warm wanted",
  async (t) => {
    t.ok(mayReadFromMount(fromSnapshot, "check"), "from a snapshot, untagged: maybe cold");
    t.ok(mayReadFromMount(fromSnapshot, "files"));
    t.notOk(mayReadFromMount(fromSnapshot, "off"), "strategy off: nothing");
    t.notOk(mayReadFromMount({ volumeId: "vol-2", tags: {} }, "check"), "not from a snapshot: every block is local");
    t.notOk(
      mayReadFromMount({ ...fromSnapshot, tags: { [VolumeTag.initialized]: "2026-11-30T00:00:00Z" } }, "check"),
      "tagged initialized: warm",
    );
  },
);
