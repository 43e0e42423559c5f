/**
 * Golden snapshots built in an engine machine (docker 28, the cached Debian sid root file system
 * of test/lab/machines/nspawn-boot.lab.test.ts, built on first use), one builder machine for both:
 * - the lab's golden build (src/lab/machines/nspawn-golden.ts) carries the need list on the
 *   graphdriver store, as the Packer pool builder's does: what each image read at start, recorded
 *   while the machine's dockerd runs on the volume;
 * - `ebs-cache-agent snapshot build --image-store containerd`, run in the same machine while its
 *   own docker runs: a first build killed outright once its private containerd and dockerd run,
 *   the rerun cleaning up after it and building; its image uploaded (`snapshot upload`, the EBS
 *   direct emulator) as a containerd-store generation; then a machine whose daemon.json asks for
 *   the containerd store boots, its agent claims a volume of that snapshot, and docker runs its
 *   image without a pull;
 * - Packer's builder script (packer/scripts/pool-volume.sh) with the containerd store, whole, in
 *   the same machine against a loop device (POOL_VOLUME_DEVICE): the image pulled from the lab's
 *   registry, containerd's root on the volume, the machine-local state stripped by the agent's
 *   list (`snapshot strip`), daemon.json and config.toml put back. What it cannot do here: find an
 *   EBS disk (a loop device is not a disk to lsblk), install packages (the machine gets no
 *   archive: its packages are there).
 *
 * Needs root, debootstrap, systemd-nspawn, strace, the lab's tools and (the first time) Debian's
 * archive. It never skips.
 */
import t from "tap";
import { copyFile, mkdtemp, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { run } from "../../../src/exec.ts";
import { readReadList } from "../../../src/host/need-reads.ts";
import { writeImageArchive } from "../../../src/lab/docker/images.ts";
import { startLabRegistry } from "../../../src/lab/docker/registry.ts";
import { pushImageArchive } from "../../../src/lab/docker/registry-push.ts";
import { startLab } from "../../../src/lab/lab.ts";
import { buildEngineGoldenSnapshot } from "../../../src/lab/machines/nspawn-golden.ts";
import { machineStatus, startEngineHost, waitForReadyUnit } from "../../../src/lab/machines/nspawn-host.ts";
import { createPoolVolumes } from "../../../src/lab/volumes/golden.ts";
import { attach, createVolume } from "../../../src/lab/volumes/volumes.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { agentBundle, REPO } from "../../fixtures/lab/agent-bundle.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";
import {
  assertNspawnPrerequisites,
  CACHE_BASE,
  cachedRootfs,
  ENGINES,
  type Machine,
} from "../../fixtures/lab/nspawn.ts";

await assertLabPrerequisites();
await assertNspawnPrerequisites();

/** The containerd-store generation `snapshot build` makes in the builder machine. */
const CONTAINERD_POOL = "c";
const CONTAINERD_SET = "cs1";
const CONTAINERD_IMAGE = { tag: "lab/served:1", payloadBytes: 2 * 1024 * 1024 };
/** In the builder machine: the image, its build folder and the tarball it loads. */
const IMAGE = "/var/tmp/set.img";
const WORK = "/var/tmp/b";
const TARBALL = "/var/tmp/served.tar";

/**
 * Prints the volume's need list (mounted at $1, in the machine: node is there for the agent):
 * `version N`, then `listed <path> <kind>` per file, its kind by lstat of each component from the
 * volume's root (what the boot's walk finds).
 */
const LIST_FILES =
  `node -e 'const fs = require("fs"); const root = process.argv[1];` +
  ` const list = JSON.parse(fs.readFileSync(root + "/.ebs-cache-agent/reads.json", "utf8"));` +
  ` console.log("version " + list.version);` +
  ` for (const f of list.images.flatMap((e) => e.files)) { let p = root, kind = "file";` +
  ` for (const part of f.split("/")) { p += "/" + part; const s = fs.lstatSync(p, { throwIfNoEntry: false });` +
  ` if (!s) { kind = "missing"; break } if (s.isSymbolicLink()) { kind = "link"; break } }` +
  ` if (kind === "file" && !fs.lstatSync(p).isFile()) kind = "other"; console.log("listed " + f + " " + kind) }'`;

interface BuildReport {
  seconds: number;
  images: string[];
  imageStore: string;
  engineVersion: string;
  needList: string[];
  stripped: number;
}

t.test("engine machine builds: the need list on graphdriver, `snapshot build` of the containerd store", async (t) => {
  const log = createMemoryLogger("info");
  const rootfs = await cachedRootfs(ENGINES["28"], (line) => t.comment(line));
  const work = await mkdtemp(join(CACHE_BASE, "golden-test-"));
  t.teardown(() => rm(work, { recursive: true, force: true }));
  // The run's production build of the agent (one per `npm test`), as install.sh installs it.
  const bundle = await agentBundle();
  const lab = await startLab({ name: "test-nspawn-golden", log });
  t.teardown(() => lab.close());

  let built: BuildReport | undefined;
  let snapshotId = "";
  const inBuilder = async (m: Machine) => {
    const sh = (script: string, timeoutMs = 300_000) => m.exec(["sh", "-c", script], timeoutMs);
    await writeImageArchive(join(m.dir, TARBALL), { ...CONTAINERD_IMAGE, workDir: join(work, "archive") });
    const command =
      `ebs-cache-agent snapshot build --image ${IMAGE} --size-gib 2 --images ${CONTAINERD_IMAGE.tag} ` +
      `--load ${TARBALL} --no-pull --image-store containerd --work-dir ${WORK}`;
    const namespaces = "ctr --address /run/containerd/containerd.sock namespaces ls --quiet";
    const before = await sh(namespaces);

    // Killed outright once its containerd and dockerd run: both are left, with the mount and the loop.
    const killed = await sh(
      `${command} >/var/tmp/killed.log 2>&1 & pid=$!; ` +
        `until grep -q 'build-step: load' /var/tmp/killed.log; do kill -0 $pid || exit 3; sleep 0.1; done; ` +
        `kill -KILL $pid; cat ${WORK}/d/c/containerd.pid`,
    );
    t.equal(killed.exitCode, 0, "the first build got as far as loading", { out: killed.stderr + killed.stdout });
    const leftover = killed.stdout.trim();
    t.equal((await sh(`kill -0 ${leftover}`)).exitCode, 0, "the killed build left its containerd running");

    const rerun = await sh(`${command} --json`);
    t.equal(rerun.exitCode, 0, "the rerun builds", { stderr: rerun.stderr.slice(-3000) });
    built = JSON.parse(rerun.stdout) as BuildReport;
    t.equal((await sh(`kill -0 ${leftover}`)).exitCode, 1, "the rerun stopped the leftover containerd");
    t.equal((await sh(`losetup -j ${IMAGE} -n`)).stdout.trim(), "", "no loop device of the image is left");
    t.equal((await sh(`findmnt -rn -o TARGET | grep -c '^${WORK}'`)).stdout.trim(), "0", "nothing is mounted");
    t.equal((await sh(`test -e ${WORK}/d/c/containerd.pid`)).exitCode, 1, "no containerd of the build runs");
    t.equal((await sh(namespaces)).stdout, before.stdout, "the machine's containerd got no namespace of the build");

    // The image, looked at read-only: the layout a boot on a containerd host expects, and the need list.
    const look = await sh(
      `mkdir -p /mnt/look && mount -o ro,nouuid,loop ${IMAGE} /mnt/look && ls /mnt/look /mnt/look/containerd; ` +
        `ls /mnt/look/docker; ${LIST_FILES} /mnt/look; umount /mnt/look`,
    );
    t.match(look.stdout, /^version 2$/m, "the build recorded the need list, version 2 (files of containerd's root)");
    const listed = [...look.stdout.matchAll(/^listed (\S+) (\S+)$/gm)].map((m) => [m[1], m[2]]);
    t.ok(listed.length >= 1, "the list names what the image read at start", { out: look.stdout });
    t.same(
      listed.filter(([, kind]) => kind !== "file"),
      [],
      "each listed file is a regular file on the volume (walked from its root)",
    );
    t.match(
      listed[0]?.[0] ?? "",
      /^containerd\/io\.containerd\.snapshotter\.v1\.overlayfs\/snapshots\/\d+\/fs\/bin\/busybox$/,
      "first the image's shell, in a snapshot of containerd's root on the volume",
    );
    t.match(look.stdout, /io\.containerd\.content\.v1\.content/, "containerd's content store is on the image");
    t.match(look.stdout, /io\.containerd\.snapshotter\.v1\.overlayfs/, "and its unpacked snapshots");
    t.notMatch(look.stdout, /io\.containerd\.grpc\.v1\.introspection|tmpmounts|engine-id/, "machine-local state went");

    const uploaded = await run(
      process.execPath,
      [
        ...[bundle, "snapshot", "upload", "--image", join(m.dir, IMAGE), "--manifest", join(work, "cs1.json")],
        ...["--pool", CONTAINERD_POOL, "--image-set", CONTAINERD_SET, "--images", CONTAINERD_IMAGE.tag],
        ...["--image-store", built.imageStore, "--engine-version", built.engineVersion],
        ...["--region", lab.region, "--endpoint", lab.ec2.endpoint, "--ec2-endpoint", lab.ec2.endpoint, "--json"],
      ],
      {
        check: false,
        timeoutMs: 300_000,
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", AWS_ACCESS_KEY_ID: "lab", AWS_SECRET_ACCESS_KEY: "lab" },
      },
    );
    t.equal(uploaded.exitCode, 0, "snapshot upload exits 0", { stderr: uploaded.stderr.slice(-2000) });
    const up = JSON.parse(uploaded.stdout) as { snapshotId: string; bytesPut: number };
    snapshotId = up.snapshotId;
    await packerPoolVolume(m, sh);
    t.comment(
      `containerd store: built in ${built.seconds} s, ` +
        `${(up.bytesPut / 2 ** 20).toFixed(1)} MiB uploaded for an image of ` +
        `${(CONTAINERD_IMAGE.payloadBytes / 2 ** 20).toFixed(0)} MiB of payload`,
    );
  };

  /** packer/scripts/pool-volume.sh with IMAGE_STORE=containerd, run in the builder machine `m`. */
  const packerPoolVolume = async (m: Machine, sh: (script: string) => ReturnType<Machine["exec"]>) => {
    const registry = await startLabRegistry({
      labRoot: lab.root,
      dir: join(work, "registry"),
      netns: `/proc/${process.pid}/ns/net`,
    });
    const [repository, tag] = CONTAINERD_IMAGE.tag.split(":") as [string, string];
    await pushImageArchive(registry.address, join(m.dir, TARBALL), repository, tag, work);
    await copyFile(join(REPO, "packer/scripts/pool-volume.sh"), join(m.dir, "var/tmp/pool-volume.sh"));
    // The machine shares the host's network: its docker makes no bridge and no iptables rules
    // there (flags, as an operator's DOCKER_OPTS: the script writes daemon.json whole). No archive:
    // the script's apt-get finds its packages installed.
    await writeFile(
      join(m.dir, "etc/default/docker"),
      'DOCKER_OPTS="--bridge=none --iptables=false --ip6tables=false"\n',
    );
    await sh("mkdir -p /root/apt-off && mv /etc/apt/sources.list /etc/apt/sources.list.d/* /root/apt-off/; true");
    const configs = "md5sum /etc/docker/daemon.json /etc/containerd/config.toml";
    const before = await sh(configs);
    const loop = (await sh("truncate -s 1G /var/tmp/pv.img && losetup -f --show /var/tmp/pv.img")).stdout.trim();
    try {
      const packer = await m.exec(
        [
          ...["env", "DOCKER_PACKAGE=docker.io", "POOL_VOLUME_SIZE_GIB=1", `POOL_VOLUME_DEVICE=${loop}`],
          ...[`IMAGES=${registry.address}/${CONTAINERD_IMAGE.tag}`, "IMAGE_STORE=containerd"],
          ...["bash", "/var/tmp/pool-volume.sh"],
        ],
        600_000,
      );
      t.equal(packer.exitCode, 0, "pool-volume.sh builds the containerd store", { out: packer.stdout + packer.stderr });
      t.match(packer.stdout, /machine-local paths stripped/, "by the agent's list (snapshot strip)");
      t.equal((await sh(configs)).stdout, before.stdout, "daemon.json and config.toml are put back");
      const look = await sh(
        `mount -o ro ${loop} /mnt/look && ls /mnt/look/containerd /mnt/look/docker; ${LIST_FILES} /mnt/look; ` +
          `umount /mnt/look`,
      );
      t.match(look.stdout, /^version 2$/m, "the Packer flow recorded the need list too");
      t.match(look.stdout, /^listed containerd\/\S+\/fs\/bin\/busybox file$/m, "a file of containerd's root");
      t.match(look.stdout, /io\.containerd\.content\.v1\.content/, "the pulled image is in containerd's root");
      t.notMatch(look.stdout, /introspection|tmpmounts|runtime\.v2\.task|engine-id/, "machine-local state went");
    } finally {
      await sh(`losetup -d ${loop}; rm -f /var/tmp/pv.img /etc/default/docker`);
      await registry.stop();
    }
  };

  const golden = await buildEngineGoldenSnapshot(lab, {
    pool: "p",
    imageSet: "s1",
    images: [{ tag: "lab/app:1" }, { tag: "lab/tool:2" }],
    rootfs: rootfs.dir,
    bundle,
    store: "graphdriver",
    inBuilder,
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
    reads?.images.map((entry) => [entry.image, entry.files[0]?.replace(/^docker\/overlay2\/[^/]+\/diff\//, "")]),
    [
      ["lab/app:1", "bin/busybox"],
      ["lab/tool:2", "bin/busybox"],
    ],
    "the build recorded what each image reads at start (its shell), paths of the volume's data-root",
  );
  await run("umount", [mountPoint]);

  // The containerd-store generation serves a containerd host.
  if (built === undefined) throw new Error("the containerd build did not run");
  t.match(built, {
    images: [CONTAINERD_IMAGE.tag],
    imageStore: "containerd",
    engineVersion: /^28\./,
    needList: [CONTAINERD_IMAGE.tag],
  });
  t.ok(built.stripped > 0, "machine-local state was stripped");
  const [poolVolume] = await createPoolVolumes(
    lab,
    {
      snapshotId,
      sizeGiB: 2,
      images: [CONTAINERD_IMAGE.tag],
      built: { store: "containerd", engineVersion: built.engineVersion },
    },
    { pool: CONTAINERD_POOL, imageSet: CONTAINERD_SET, count: 1 },
  );
  let node: Machine | undefined;
  t.teardown(() => node?.destroy());
  const booted = await startEngineHost(
    lab,
    {
      rootfs: rootfs.dir,
      bundle,
      store: "containerd",
      name: "containerd-node",
      overrides: { pool: CONTAINERD_POOL, imageSet: CONTAINERD_SET },
    },
    (m) => (node = m),
  );
  await waitForReadyUnit(booted.machine, 6 * 60_000);
  const status = await machineStatus(booted.machine);
  t.equal(status.boot?.outcome, "ready", "the containerd host's boot is ready");
  t.equal(status.volume?.volumeId, poolVolume, "it claimed the volume of the uploaded containerd-store snapshot");
  const ran = await booted.machine.exec(
    ["docker", "run", "--rm", "--pull=never", "--network", "none", CONTAINERD_IMAGE.tag, "ls", "/payload"],
    120_000,
  );
  t.equal(ran.exitCode, 0, "docker runs the built image without a pull", { stderr: ran.stderr });
  t.match(ran.stdout, /blob-000\.bin/, "from the volume's containerd store");
});
