/**
 * The golden snapshot an engine machine builds (src/lab/machines/nspawn-golden.ts) carries the
 * need list on the graphdriver store, as the Packer pool builder's does: what each image read at
 * start, recorded while the machine's dockerd runs on the volume. Docker 28 (the cached Debian sid
 * root file system of test/lab/machines/nspawn-boot.lab.test.ts, built on first use).
 *
 * Needs root, debootstrap, systemd-nspawn, strace, the lab's tools and (the first time) Debian's
 * archive. It never skips.
 */
import t from "tap";
import { mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { run } from "../../../src/exec.ts";
import { readReadList } from "../../../src/host/need-reads.ts";
import { startLab } from "../../../src/lab/lab.ts";
import { buildEngineGoldenSnapshot } from "../../../src/lab/machines/nspawn-golden.ts";
import { attach, createVolume } from "../../../src/lab/volumes/volumes.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { assertLabPrerequisites } from "../../fixtures/lab-prereq.ts";
import { assertNspawnPrerequisites, buildBundle, CACHE_BASE, cachedRootfs, ENGINES } from "../../fixtures/nspawn.ts";

await assertLabPrerequisites();
await assertNspawnPrerequisites();

t.test("an engine machine's golden snapshot holds the need list of its images", async (t) => {
  const log = createMemoryLogger("info");
  const rootfs = await cachedRootfs(ENGINES["28"], (line) => t.comment(line));
  const work = await mkdtemp(join(CACHE_BASE, "golden-test-"));
  t.teardown(() => rm(work, { recursive: true, force: true }));
  const bundle = await buildBundle(work);
  const lab = await startLab({ name: "test-nspawn-golden", log });
  t.teardown(() => lab.close());

  const golden = await buildEngineGoldenSnapshot(lab, {
    pool: "p",
    imageSet: "s1",
    images: [{ tag: "lab/app:1" }, { tag: "lab/tool:2" }],
    rootfs: rootfs.dir,
    bundle,
    store: "graphdriver",
    log,
  });
  t.equal(golden.built.store, "graphdriver");

  const ec2 = lab.ec2Client();
  const host = await lab.addHost();
  const volumeId = await createVolume(ec2, host.instance.availabilityZone, { snapshotId: golden.snapshotId });
  const device = await attach(lab, ec2, volumeId, host);
  const mountPoint = join(host.paths.mountRoot, volumeId);
  await run("mkdir", ["-p", mountPoint]);
  await run("mount", ["-o", "ro,nouuid", device, mountPoint]);
  t.teardown(() => run("umount", [mountPoint], { check: false }));
  const reads = await readReadList(mountPoint);
  t.same(
    reads?.images.map((entry) => [entry.image, entry.files[0]?.replace(/^overlay2\/[^/]+\/diff\//, "")]),
    [
      ["lab/app:1", "bin/busybox"],
      ["lab/tool:2", "bin/busybox"],
    ],
    "the build recorded what each image reads at start (its shell), paths of the volume's data-root",
  );
});
