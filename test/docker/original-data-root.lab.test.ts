/**
 * osparc-simcore #7733 on the lab: a host whose docker runs on a disk of its own (daemon.json
 * `data-root` at `<host>/mnt/docker`, as osparc's AMI sets it) boots on a pool volume, releases
 * it, and then boots degraded: docker comes back on `<host>/mnt/docker`, not on docker's default
 * under the root disk (which the release used to leave by removing the key).
 */
import t from "tap";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ORIGINAL_DATA_ROOT_FILE } from "../../src/docker/original-data-root.ts";
import { POOL, startBootLab } from "../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../fixtures/lab/lab-prereq.ts";
import { assertOutcome, releaseHost } from "../fixtures/lab/lifecycle-lab.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-original-data-root", poolSize: 1 });
t.teardown(() => bl.close());

t.test("boot, release, degraded boot: docker stays on the AMI's disk", async (t) => {
  const host = await bl.addHost();
  const amiDisk = join(host.paths.hostRoot, "mnt", "docker");
  await mkdir(amiDisk, { recursive: true });
  await writeFile(host.paths.daemonJson, JSON.stringify({ "data-root": amiDisk }, null, 2) + "\n");

  const booted = await bl.boot(host, { overrides: { pool: POOL } });
  assertOutcome(t, booted, "ready", "boot: ready on a pool volume");
  const record = JSON.parse(
    await readFile(join(host.paths.hostRoot, "var/lib/ebs-cache-agent", ORIGINAL_DATA_ROOT_FILE), "utf8"),
  ) as { dataRoot: string };
  t.equal(record.dataRoot, amiDisk, "the host's own data-root recorded at the switch");

  await host.dockerd!.stop(); // systemd stops docker.service before the agent's ExecStop
  const released = await releaseHost(bl, host);
  assertOutcome(t, released, "released", "release: released");
  const daemon = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
  t.equal(daemon["data-root"], amiDisk, "daemon.json back on the AMI's disk, not docker's default");

  const degraded = await bl.boot(host, { overrides: { pool: "nothing-here" } });
  assertOutcome(t, degraded, "degraded", "a later boot with nothing to claim: degraded");
  t.equal((await host.dockerd!.info()).DockerRootDir, amiDisk, "docker runs on the AMI's disk again");
});
