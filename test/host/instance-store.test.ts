/**
 * Instance-store NVMe disks (src/host/instance-store.ts) are found from sysfs by their
 * controller's model, told apart from EBS volumes (the agent's and the root disk), and reported:
 * the boot's host metrics and a log line. A sysfs tree is built in a temp folder: the host's own
 * disks are never looked at, and nothing is ever written to a device.
 */
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { findInstanceStoreDisks, INSTANCE_STORE_MODEL } from "../../src/host/instance-store.ts";
import { hostMetrics } from "../../src/metrics/host.ts";
import { createOutcomeRecorder } from "../../src/status/recorder.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { readyBoot } from "../fixtures/use-case-results.ts";

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
