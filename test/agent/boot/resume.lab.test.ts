/**
 * The second boot phase (`boot --no-claim`) after the first (`boot --no-docker`) on a lab host:
 * what phase 1 prepared in this boot of the machine (its record, prepared.json, with the kernel's
 * boot id) is confirmed in one step, `resume-prepared`, instead of identified, mounted, grown,
 * cleaned and switched again; a volume not as phase 1 left it (unmounted meanwhile) is prepared
 * again; a record of another boot counts for nothing.
 */
import t, { type Test } from "tap";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { bootLabHost } from "../../../src/lab/machines/agent.ts";
import type { LabHost } from "../../../src/lab/lab.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { DATA_ROOT_SUBDIR } from "../../../src/layout.ts";
import { run } from "../../../src/exec.ts";
import { findmnt, POOL, startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-boot-resume", poolSize: 3 });
t.teardown(() => bl.close());

const PREPARING = ["check-filesystem", "mount", "grow-filesystem", "prepare-data-root", "switch-data-root"];
const overrides = { pool: POOL, prewarm: { strategy: "off" as const } };
const stateDir = (host: LabHost) => join(host.paths.hostRoot, "var/lib/ebs-cache-agent");
const thisBoot = (await readFile("/proc/sys/kernel/random/boot_id", "utf8")).trim();

async function phase(host: LabHost, which: "first" | "second") {
  const log = createMemoryLogger("debug");
  const outcome = await bootLabHost(bl.lab, host, {
    overrides,
    log,
    ...(which === "first" ? { withDocker: false } : { mayClaim: false }),
  });
  return { ...outcome, log: log.lines };
}

async function firstPhase(t: Test, host: LabHost) {
  const first = await phase(host, "first");
  t.equal(first.report?.outcome, "prepared", "phase 1: prepared", { log: first.log.join("\n") });
  const record = JSON.parse(await readFile(join(stateDir(host), "prepared.json"), "utf8")) as Record<string, unknown>;
  t.match(
    record,
    {
      version: 1,
      bootId: thisBoot,
      instanceId: host.instance.instanceId,
      volumeId: first.report?.volumeId,
      mountPoint: first.report?.mountPoint,
      dataRoot: first.report?.dataRoot,
    },
    "phase 1 recorded what it prepared, with this boot's id",
  );
  return first;
}

t.test("phase 2 confirms what phase 1 of this boot prepared instead of doing it again", async (t) => {
  const host = await bl.addHost();
  const first = await firstPhase(t, host);
  await host.startDocker();
  const second = await phase(host, "second");
  t.equal(second.report?.outcome, "ready", "phase 2: ready", { log: second.log.join("\n") });
  const steps = second.plan.steps.map((s) => s.step);
  t.ok(steps.includes("resume-prepared"), "planned: resume-prepared", { steps });
  t.same(
    steps.filter((s) => PREPARING.includes(s)),
    [],
    "none of the preparing steps planned",
  );
  t.same(
    second.report?.timeline.map((s) => s.step).filter((s) => PREPARING.includes(s)),
    [],
    "nor run",
  );
  t.match(second.log.join("\n"), /boot\.resume.*prepared by the first phase of this boot/);
  t.equal(second.report?.dataRoot, join(first.report!.mountPoint!, DATA_ROOT_SUBDIR));
  t.equal(
    (await host.dockerd!.info()).DockerRootDir,
    first.report?.dataRoot,
    "docker runs on the volume phase 1 prepared",
  );
});

t.test(
  "a volume unmounted between the phases is prepared again; a record of another boot counts for nothing",
  async (t) => {
    const host = await bl.addHost();
    const first = await firstPhase(t, host);
    await run("umount", [first.report!.mountPoint!]);
    const second = await phase(host, "second");
    t.equal(second.report?.outcome, "ready", "phase 2: ready after all", { log: second.log.join("\n") });
    t.match(second.log.join("\n"), /boot\.resume.*not as the first phase of this boot left it: preparing it again/);
    t.equal((await findmnt(first.report!.mountPoint!))?.fsType, "xfs", "mounted again, where phase 1 had it");
    t.equal((await host.dockerd!.info()).DockerRootDir, first.report?.dataRoot);

    const other = await bl.addHost();
    await firstPhase(t, other);
    const path = join(stateDir(other), "prepared.json");
    const record = JSON.parse(await readFile(path, "utf8")) as Record<string, unknown>;
    await writeFile(path, JSON.stringify({ ...record, bootId: "an-earlier-boot" }));
    await other.startDocker();
    const after = await phase(other, "second");
    t.equal(after.report?.outcome, "ready", { log: after.log.join("\n") });
    t.same(
      after.plan.steps.map((s) => s.step).filter((s) => PREPARING.includes(s)),
      PREPARING,
      "another boot's record: every step",
    );
  },
);
