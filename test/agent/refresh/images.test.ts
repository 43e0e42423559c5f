/**
 * osparc's pre-pulled images tag under the key osparc writes (`INSTANCE_PRE_PULLED_IMAGES_EC2_TAG_KEY`,
 * services/autoscaling constants.py), and the warning when osparc's buffer tags say the list should
 * be there and the configured key does not find it.
 */
import t from "tap";
import { BufferTag, bufferRole } from "../../../src/agent/buffer-tags.ts";
import { missingPrePulledListWarning, readPrePulledImages } from "../../../src/agent/refresh/images.ts";
import { planRefresh } from "../../../src/agent/refresh/plan.ts";
import { defaultConfig } from "../../../src/config/schema.ts";

const OSPARC_KEY = "io.simcore.autoscaling.pre_pulled_images";
const OLD_KEY = "io.simcore.autoscaling.ec2_instance.pre_pulled_images";
const LIST = JSON.stringify(["itisfoundation/dynamic-sidecar:1.2.3", "redis:7"]);

t.test("the default key is osparc's", async (t) => {
  t.equal(BufferTag.prePulledImages, OSPARC_KEY);
  t.equal(defaultConfig().refresh.prePulledImagesTag, OSPARC_KEY);
  t.same(readPrePulledImages({ [OSPARC_KEY]: LIST }, OSPARC_KEY).images, [
    "itisfoundation/dynamic-sidecar:1.2.3",
    "redis:7",
  ]);
});

t.test("buffer roles, the legacy key included", async (t) => {
  t.equal(bufferRole({ [BufferTag.warm]: "true" }), "warm-dormant");
  t.equal(bufferRole({ [BufferTag.warm]: "false" }), "warm-activated");
  t.equal(bufferRole({ [BufferTag.legacyWarm]: "true" }), "warm-dormant");
  // osparc's activation writes the new key only: the legacy `true` stays beside it.
  t.equal(bufferRole({ [BufferTag.legacyWarm]: "true", [BufferTag.warm]: "false" }), "warm-activated");
  t.equal(bufferRole({ [BufferTag.warm]: "false", [BufferTag.hot]: "true" }), "hot");
  t.equal(bufferRole({ Name: "osparc-dynamic-node" }), undefined);
});

t.test("a warning when the buffer tags are there and the list is not", async (t) => {
  const activated = { [BufferTag.warm]: "false" };
  t.match(missingPrePulledListWarning(activated, OSPARC_KEY), /warm buffer tags are present but no/);
  t.match(missingPrePulledListWarning({ [BufferTag.hot]: "true" }, OSPARC_KEY), /hot buffer tags/);
  t.equal(missingPrePulledListWarning({ ...activated, [OSPARC_KEY]: LIST }, OSPARC_KEY), undefined, "the list: none");
  t.equal(
    missingPrePulledListWarning(
      { ...activated, [`${OSPARC_KEY}_0`]: LIST.slice(0, 10), [`${OSPARC_KEY}_1`]: LIST.slice(10) },
      OSPARC_KEY,
    ),
    undefined,
    "chunks count as the list",
  );
  t.equal(
    missingPrePulledListWarning({ [BufferTag.warm]: "true" }, OSPARC_KEY),
    undefined,
    "a buffer before its pull: none",
  );
  t.equal(missingPrePulledListWarning({}, OSPARC_KEY), undefined, "a cold node: none");
  t.equal(missingPrePulledListWarning(activated, null), undefined, "not read (null): none");
  t.match(
    missingPrePulledListWarning({ [OSPARC_KEY]: LIST }, OLD_KEY),
    new RegExp(
      String.raw`carries osparc's pre-pulled images tag .* but refresh.prePulledImagesTag ` +
        String.raw`is "io.simcore.autoscaling.ec2_instance.pre_pulled_images"`,
    ),
    "the old key configured beside osparc's tag",
  );
});

t.test("the refresh plan carries the warning", async (t) => {
  const plan = planRefresh(
    { concurrency: 1, pullSeconds: 60, prePulledImagesTag: OLD_KEY, imageSet: null },
    {
      volume: { volumeId: "vol-1", tags: { "ebs-cache:kind": "pool" } },
      snapshots: [],
      instanceTags: { [BufferTag.warm]: "false", [OSPARC_KEY]: LIST },
      present: [],
    },
  );
  t.ok(
    plan.warnings.some((w) => w.includes(OSPARC_KEY)),
    "named in the plan's warnings",
    { warnings: plan.warnings },
  );
  t.same(
    plan.steps.filter((s) => s.step === "pull"),
    [],
    "and nothing pulled from a list under another key",
  );
});
