/**
 * The lab's EBS model file (src/lab/volumes/ebs-model.ts): the assumed one is what the cold layer's
 * defaults are, a model becomes the layer's settings and EC2's attach delay, and a file that is no
 * model is refused in one line. (The schema and the parser agree: test/config/schema-oracle.test.ts.)
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { COLD_LAYER_DEFAULTS } from "../../../src/lab/volumes/cold.ts";
import {
  attachDelayMsOf,
  coldSnapshotOptionsOf,
  DEFAULT_EBS_MODEL_FILE,
  describeEbsModel,
  predictedFirstReadMs,
  readEbsModel,
  type EbsModel,
} from "../../../src/lab/volumes/ebs-model.ts";

t.test("the assumed model is the cold layer's defaults, and fits its own depth figures", async (t) => {
  const model = await readEbsModel();
  t.equal(model.origin, "assumed");
  const options = coldSnapshotOptionsOf(model);
  t.equal(options.chunkBytes, COLD_LAYER_DEFAULTS.chunkBytes);
  t.equal(options.fetchConcurrency, COLD_LAYER_DEFAULTS.fetchConcurrency);
  t.equal(options.throughputMiBps, COLD_LAYER_DEFAULTS.throughputMiBps);
  t.equal(predictedFirstReadMs(model, 8), model.firstReadLatencyMs.qd8, "8 at once: one delay each");
  t.equal(predictedFirstReadMs(model, 32), model.firstReadLatencyMs.qd32, "32: four rounds of 8");
  t.match(describeEbsModel(model, "default"), /^EBS model default \(assumed, m6i\.large, us-east-1, [^)]+\): attach/);
});

t.test("a measured model becomes the layer's settings and the attach delay", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "ebs-model-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const measured: EbsModel = {
    schemaVersion: 1,
    origin: "measured",
    source: "acceptance run",
    instanceType: "c6id.large",
    region: "eu-west-1",
    date: "2026-12-05",
    attachSeconds: 2.3456,
    firstReadLatencyMs: { qd1: 9, qd8: 10, qd32: 18 },
    concurrency: 16,
    warmThroughputMiBps: 250,
  };
  const file = join(dir, "model.json");
  await writeFile(file, JSON.stringify(measured));
  const model = await readEbsModel(file);
  t.same(coldSnapshotOptionsOf(model), {
    firstReadDelayMs: 9,
    chunkBytes: 512 * 1024,
    fetchConcurrency: 16,
    throughputMiBps: 250,
  });
  t.equal(attachDelayMsOf(model), 2346, "ms, rounded");
  t.equal(predictedFirstReadMs(model, 32), 18, "32 reads, 16 at once: two delays");
});

t.test("a file that is no model: one line naming it", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "ebs-model-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const missing = join(dir, "missing.json");
  await t.rejects(readEbsModel(missing), {
    name: "EbsModelError",
    message: /^.*missing\.json: cannot read the EBS model: /,
  });
  const broken = join(dir, "broken.json");
  await writeFile(broken, "{ attachSeconds: 1 ");
  await t.rejects(readEbsModel(broken), { message: /broken\.json: not JSON: / });
  const wrong = join(dir, "wrong.json");
  const assumed = await readEbsModel(DEFAULT_EBS_MODEL_FILE);
  await writeFile(wrong, JSON.stringify({ ...assumed, concurrency: 0 }));
  await t.rejects(readEbsModel(wrong), {
    message: /wrong\.json: not an EBS model: concurrency must be an integer from 1 to 1024, got 0$/,
  });
});
