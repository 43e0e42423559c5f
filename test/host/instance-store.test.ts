/**
 * Instance-store NVMe disks (src/host/instance-store.ts) are found from sysfs by their
 * controller's model, told apart from EBS volumes (the agent's and the root disk), and reported:
 * the boot's host metrics, a log line, and `status` (text and --json). A sysfs tree is built in a
 * temp folder: the host's own disks are never looked at, and nothing is ever written to a device.
 */
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { findInstanceStoreDisks, INSTANCE_STORE_MODEL } from "../../src/host/instance-store.ts";
import { hostMetrics } from "../../src/metrics/host.ts";
import { createOutcomeRecorder, hostFacts } from "../../src/status/recorder.ts";
import { readHostContext } from "../../src/host/facts.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { buildStatus } from "../../src/status/document.ts";
import { observeStatus } from "../../src/status/observe.ts";
import { renderStatus } from "../../src/status/view.ts";
import { readyBoot } from "../fixtures/builders/use-case-results.ts";

async function sysfs(
  t: { teardown(fn: () => unknown): void },
  disks: Record<string, { model: string; sectors: number }>,
) {
  const root = await mkdtemp(join(tmpdir(), "instance-store-"));
  t.teardown(() => rm(root, { recursive: true, force: true }));
  for (const [name, { model, sectors }] of Object.entries(disks)) {
    const dir = join(root, "class", "block", name);
    await mkdir(join(dir, "device"), { recursive: true });
    // Padded as the kernel pads it.
    await writeFile(join(dir, "device", "model"), model.padEnd(40) + "\n");
    await writeFile(join(dir, "size"), `${sectors}\n`);
  }
  return root;
}

t.test("instance-store disks are told apart from EBS volumes and partitions", async (t) => {
  const root = await sysfs(t, {
    nvme0n1: { model: "Amazon Elastic Block Store", sectors: 16777216 },
    nvme1n1: { model: INSTANCE_STORE_MODEL, sectors: 1953125000 },
    nvme2n1: { model: INSTANCE_STORE_MODEL, sectors: 1953125000 },
    nvme3n1: { model: "Amazon Elastic Block Store", sectors: 104857600 },
    nvme1n1p1: { model: INSTANCE_STORE_MODEL, sectors: 100 },
  });
  t.same(await findInstanceStoreDisks(root), [
    { device: "/dev/nvme1n1", sizeBytes: 1953125000 * 512 },
    { device: "/dev/nvme2n1", sizeBytes: 1953125000 * 512 },
  ]);
  t.same(await findInstanceStoreDisks(join(root, "nowhere")), [], "no sysfs: none");
});

t.test("reported: host metrics and a log line at the boot's figures", async (t) => {
  const instanceStore = [{ device: "/dev/nvme1n1", sizeBytes: 500e9 }];
  const families = hostMetrics({ memoryBytes: 1, cpuCores: 1, cpuModel: "x", instanceStore });
  t.equal(families.find((f) => f.name.endsWith("host_instance_store_disks"))?.samples[0]?.value, 1);
  t.equal(families.find((f) => f.name.endsWith("host_instance_store_bytes"))?.samples[0]?.value, 500e9);
  t.notOk(
    hostMetrics({ memoryBytes: 1, cpuCores: 1, cpuModel: "x" }).some((f) => f.name.includes("instance_store")),
    "not looked for: no series",
  );

  const dir = await mkdtemp(join(tmpdir(), "instance-store-rec-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const log = createMemoryLogger();
  const recorder = createOutcomeRecorder({
    stateDir: dir,
    textfileDir: dir,
    log,
    facts: {
      cacheFilesystem: async () => undefined,
      host: async () => ({ memoryBytes: 1, cpuCores: 1, cpuModel: "x", instanceStore }),
    },
  });
  await recorder.bootFinished({
    instanceId: "i-1",
    phase: "single",
    finishedAt: new Date(),
    report: readyBoot,
  });
  t.match(log.lines.join("\n"), /host\.instance-store.*\/dev\/nvme1n1 500 GB/);
});

t.test("the boot's host metrics read the disks under paths.sysfsRoot, as status does", async (t) => {
  const root = await sysfs(t, {
    nvme0n1: { model: "Amazon Elastic Block Store", sectors: 16777216 },
    nvme4n1: { model: INSTANCE_STORE_MODEL, sectors: 1000 },
  });
  const disks = [{ device: "/dev/nvme4n1", sizeBytes: 1000 * 512 }];
  t.same((await readHostContext(root)).instanceStore, disks, "the host context: the tree's disk, not the host's");
  t.same((await hostFacts(root).host()).instanceStore, disks, "the recorder's facts: the same");

  const dir = await mkdtemp(join(tmpdir(), "instance-store-prom-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const log = createMemoryLogger();
  const recorder = createOutcomeRecorder({ stateDir: dir, textfileDir: dir, log, facts: hostFacts(root) });
  await recorder.bootFinished({ instanceId: "i-1", phase: "single", finishedAt: new Date(), report: readyBoot });
  const prom = (await readdir(dir)).filter((name) => name.endsWith(".prom"));
  const text = (await Promise.all(prom.map((name) => readFile(join(dir, name), "utf8")))).join("\n");
  t.match(text, /host_instance_store_disks 1$/m, "the boot's metrics count the tree's disk");
  t.match(text, /host_instance_store_bytes 512000$/m, "at its size");
  t.match(log.lines.join("\n"), /host\.instance-store.*\/dev\/nvme4n1/);
});

t.test("status shows the instance-store disks, in text and in its document", async (t) => {
  const root = await sysfs(t, {
    nvme0n1: { model: "Amazon Elastic Block Store", sectors: 16777216 },
    nvme1n1: { model: INSTANCE_STORE_MODEL, sectors: 1953125000 },
  });
  const stateDir = await mkdtemp(join(tmpdir(), "instance-store-state-"));
  t.teardown(() => rm(stateDir, { recursive: true, force: true }));
  const sources = {
    stateDir,
    prewarm: async () => ({ running: false }),
    filesystem: async () => undefined,
    dockerDataRoot: async () => undefined,
  };
  const doc = buildStatus(await observeStatus({ ...sources, instanceStore: () => findInstanceStoreDisks(root) }));
  t.same(doc.instanceStore, [{ device: "/dev/nvme1n1", sizeBytes: 1953125000 * 512 }], "--json: the disk, not EBS");
  t.match(renderStatus(doc).join("\n"), /^instance-store: \/dev\/nvme1n1 931\.3 GiB \(NVMe/m, "the text names it");
  const none = buildStatus(await observeStatus({ ...sources, instanceStore: () => findInstanceStoreDisks(stateDir) }));
  t.same(none.instanceStore, [], "none on a host without any");
  t.notMatch(renderStatus(none).join("\n"), /instance-store/, "and no line for them");
  t.equal(buildStatus(await observeStatus(sources)).instanceStore, null, "null when not looked for");
});
