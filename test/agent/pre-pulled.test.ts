/**
 * osparc's `pre_pulled_images` instance tag as the prune reads it (src/agent/pre-pulled.ts): the
 * tags built as services/autoscaling `utils/utils_ec2.py` `dump_as_ec2_tags` writes them (the
 * JSON whole up to 256 characters, else `<key>_0`, `<key>_1`, … of 256), both forms read, and a
 * tag that cannot be read is a problem, never an empty list.
 */
import t from "tap";
import { prePulledImages } from "../../src/agent/pre-pulled.ts";
import { LABELS_CHUNK_SIZE } from "../../src/agent/labels-tag.ts";

const KEY = "io.simcore.autoscaling.pre_pulled_images";

function asOsparcWrites(value: unknown): Record<string, string> {
  const text = JSON.stringify(value);
  if (text.length <= LABELS_CHUNK_SIZE) return { [KEY]: text };
  const tags: Record<string, string> = {};
  for (let i = 0; i * LABELS_CHUNK_SIZE < text.length; i++)
    tags[`${KEY}_${i}`] = text.slice(i * LABELS_CHUNK_SIZE, (i + 1) * LABELS_CHUNK_SIZE);
  return tags;
}
const many = Array.from({ length: 12 }, (_, i) => `registry.osparc.io/simcore/services/dynamic/s4l-core-${i}:3.2.${i}`);

t.test("the single tag and the chunked form, as osparc writes them", async (t) => {
  t.same(prePulledImages(asOsparcWrites(["a:1", "b:2"]), KEY), { images: ["a:1", "b:2"] }, "one tag");
  const chunked = asOsparcWrites(many);
  t.ok(Object.keys(chunked).length > 2, "long enough for chunks");
  t.same(prePulledImages(chunked, KEY), { images: [...many].sort() }, "chunks joined in index order");
  t.same(prePulledImages({ Name: "x" }, KEY), { images: [] }, "no tag: no images");
  t.same(
    prePulledImages({ ...asOsparcWrites(["old:1"]), ...chunked }, KEY),
    { images: [...many, "old:1"].sort() },
    "both forms (a rewrite half done): an image either lists is kept",
  );
});

t.test("a tag that cannot be read is a problem, never an empty list", async (t) => {
  const chunked = asOsparcWrites(many);
  delete chunked[`${KEY}_1`];
  t.match(prePulledImages(chunked, KEY), { problem: /chunk _1 missing/ });
  t.match(prePulledImages({ [KEY]: "[not json" }, KEY), { problem: /not valid JSON/ });
  t.match(prePulledImages({ [KEY]: '{"a":1}' }, KEY), { problem: /not a JSON list of image references/ });
  t.match(prePulledImages({ [KEY]: "[1,2]" }, KEY), { problem: /not a JSON list/ });
});
