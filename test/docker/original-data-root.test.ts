/**
 * The host's own data-root (src/docker/original-data-root.ts): recorded from daemon.json at the
 * agent's first switch to a cache volume (a key, or none), never overwritten by later switches,
 * never taken from a daemon.json that already points at a cache volume, and the target of every
 * restore afterwards: osparc's AMI runs docker on /mnt/docker, and a release that removed the key
 * left the next degraded boot on the small root disk (osparc-simcore #7733).
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t, { type Test } from "tap";
import { createDaemonConfig } from "../../src/docker/daemon-json.ts";
import {
  dataRootToRestore,
  ORIGINAL_DATA_ROOT_FILE,
  readOriginalDataRoot,
  recordOriginalDataRoot,
} from "../../src/docker/original-data-root.ts";
import { createMemoryLogger } from "../../src/log.ts";

const MOUNT_ROOT = "/var/lib/ebs-cache";

async function host(t: Test, daemonJson: object | undefined) {
  const dir = await mkdtemp(join(tmpdir(), "original-data-root-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, "daemon.json");
  const stateDir = join(dir, "state");
  if (daemonJson) await writeFile(path, JSON.stringify(daemonJson, null, 2) + "\n");
  const log = createMemoryLogger();
  const daemon = createDaemonConfig({ path, log, original: { stateDir, mountRoot: MOUNT_ROOT } });
  return { dir, path, stateDir, log, daemon };
}

t.test("the AMI's /mnt/docker survives switch, release, and a later degraded boot", async (t) => {
  const { stateDir, daemon } = await host(t, { "data-root": "/mnt/docker", "log-driver": "journald" });
  // First boot: the switch records the original first.
  await daemon.setDataRoot(`${MOUNT_ROOT}/vol-1/docker`);
  t.same((await readOriginalDataRoot(stateDir)).record?.dataRoot, "/mnt/docker");
  // Release: back to exactly it (not "no key").
  const target = await dataRootToRestore(stateDir, undefined);
  t.equal(target, "/mnt/docker");
  await daemon.setDataRoot(target);
  t.equal(await daemon.dataRoot(), "/mnt/docker");
  // Second boot, another volume: the record is not replaced (today's file would say the same,
  // but a run killed between the switch and the release leaves the file on a cache volume).
  await daemon.setDataRoot(`${MOUNT_ROOT}/vol-2/docker`);
  const again = await createDaemonConfig({ path: daemon.path }).dataRoot();
  t.equal(again, `${MOUNT_ROOT}/vol-2/docker`);
  t.equal((await readOriginalDataRoot(stateDir)).record?.dataRoot, "/mnt/docker", "kept from the first switch");
  // A degraded boot after a crash: daemon.json on the cache volume, the record still names the disk.
  t.equal(await dataRootToRestore(stateDir, undefined), "/mnt/docker");
  t.equal((await daemon.read())["log-driver"], "journald", "other keys untouched");
});

t.test("no data-root key at all is recorded as such, and restored as no key", async (t) => {
  const { stateDir, daemon, path } = await host(t, undefined);
  await daemon.setDataRoot(`${MOUNT_ROOT}/vol-1/docker`);
  t.same((await readOriginalDataRoot(stateDir)).record?.dataRoot, null);
  t.equal(await dataRootToRestore(stateDir, "/fallback/not/used"), undefined, "the record wins over a fallback");
  await daemon.setDataRoot(await dataRootToRestore(stateDir, undefined));
  t.notOk("data-root" in JSON.parse(await readFile(path, "utf8")));
});

t.test("a daemon.json already on a cache volume is no original: nothing recorded, a warning", async (t) => {
  const { stateDir, daemon, log } = await host(t, { "data-root": `${MOUNT_ROOT}/vol-9/docker` });
  await daemon.setDataRoot(`${MOUNT_ROOT}/vol-1/docker`);
  t.same(await readOriginalDataRoot(stateDir), {}, "nothing recorded");
  t.match(log.lines.join("\n"), /no original data-root is recorded/);
  t.equal(await dataRootToRestore(stateDir, undefined), undefined, "falls back (docker's default)");
  t.equal(await dataRootToRestore(stateDir, "/lab/var/lib/docker"), "/lab/var/lib/docker", "or to the given fallback");
});

t.test(
  "setting a data-root outside the mount root records nothing (only a switch to a cache volume does)",
  async (t) => {
    const { stateDir, daemon } = await host(t, { "data-root": "/mnt/docker" });
    await daemon.setDataRoot("/srv/docker");
    t.same(await readOriginalDataRoot(stateDir), {});
  },
);

t.test("a record that is not one is never overwritten nor used", async (t) => {
  const { stateDir, daemon, log } = await host(t, { "data-root": "/mnt/docker" });
  await recordOriginalDataRoot(stateDir, "/mnt/docker", { mountRoot: MOUNT_ROOT }); // creates the folder
  const file = join(stateDir, ORIGINAL_DATA_ROOT_FILE);
  for (const bad of ['{"dataRoot": "relative", "recordedAt": "x"}', "{not json", '{"dataRoot": null}']) {
    await writeFile(file, bad);
    await daemon.setDataRoot(`${MOUNT_ROOT}/vol-1/docker`);
    await daemon.setDataRoot("/mnt/docker");
    t.equal(await readFile(file, "utf8"), bad, `left as it is: ${bad}`);
    t.ok((await readOriginalDataRoot(stateDir)).problem, "reported as a problem");
    t.equal(await dataRootToRestore(stateDir, undefined, log), undefined, "the fallback, with a warning");
  }
  t.match(log.lines.join("\n"), /docker\.original-data-root/);
});

t.test(
  "a state folder that takes no write: nothing lost when daemon.json says what a release puts back without a " +
    "record; a switch refused, daemon.json unchanged, when it says the host's own disk",
  async (t) => {
    const dir = await mkdtemp(join(tmpdir(), "original-data-root-"));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    // A folder that holds no record and takes no new file, whoever runs the test: the kernel's.
    const stateDir = "/proc/self";
    const path = join(dir, "daemon.json");
    const log = createMemoryLogger("info");

    await writeFile(path, JSON.stringify({ "data-root": "/var/lib/docker" }) + "\n");
    const fallback = createDaemonConfig({
      path,
      log,
      original: { stateDir, mountRoot: MOUNT_ROOT, fallback: "/var/lib/docker" },
    });
    await fallback.setDataRoot(`${MOUNT_ROOT}/vol-1/docker`);
    t.equal(await fallback.dataRoot(), `${MOUNT_ROOT}/vol-1/docker`, "switched: the fallback is the host's own");
    t.match(log.lines.join("\n"), /not recorded .*none is needed, the release puts back \/var\/lib\/docker/);

    await writeFile(path, JSON.stringify({ "data-root": "/mnt/docker" }) + "\n");
    const ami = createDaemonConfig({ path, log, original: { stateDir, mountRoot: MOUNT_ROOT } });
    await t.rejects(ami.setDataRoot(`${MOUNT_ROOT}/vol-1/docker`), {
      message: /the host's own docker data-root \(\/mnt\/docker\) cannot be recorded .*not switched/,
      remediation: /free space in .* or make it writable/,
    });
    t.same(JSON.parse(await readFile(path, "utf8")), { "data-root": "/mnt/docker" }, "daemon.json as it was");
  },
);
