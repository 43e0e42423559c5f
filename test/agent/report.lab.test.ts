/**
 * A boot whose readiness labels do not take, in the lab: the whole boot succeeds on a pool
 * volume, but docker's reload does not apply daemon.json (as with a no-op ExecReload=), so the
 * engine labels never show in `docker info`. The node must not be reported ready: the outcome is
 * degraded with the reason, docker stays on the volume, and the volume is neither given back
 * nor blamed (`last-error`): it is not at fault.
 */
import t from "tap";
import { readFile } from "node:fs/promises";
import { ExitCode } from "../../src/errors.ts";
import { VolumeTag } from "../../src/tags.ts";
import { labelRecord, LABEL_PREFIX, POOL, startBootLab } from "../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-preflight-labels", poolSize: 1 });
t.teardown(() => bl.close());

t.test(
  "labels that do not show after the reload: outcome degraded, not ready; docker stays on the volume, which is " +
    "not blamed",
  async (t) => {
    const host = await bl.addHost();
    const service = host.dockerService.bind(host);
    let reloads = 0;
    // systemctl reload succeeding without dockerd re-reading its file.
    host.dockerService = () => ({ ...service(), reload: async () => void (reloads += 1) });

    const booted = await bl.boot(host, { overrides: { pool: POOL, prewarm: { strategy: "off" } } });
    const volumeId = bl.poolVolumes[0]!;
    t.equal(
      booted.report?.outcome,
      "degraded",
      "not ready",
      booted.report?.outcome === "degraded" ? {} : { log: booted.log.join("\n") },
    );
    t.equal(booted.exitCode, ExitCode.degraded, "exit code 4");
    t.match(
      booted.report?.reason,
      new RegExp(
        String.raw`^readiness labels did not take: docker info's Labels still differ ` +
          String.raw`from what was published after 15000 ms: io\.simcore\.ebs-cache\.state ` +
          String.raw`missing`,
      ),
    );
    t.ok(
      booted.log.some((line) => line.startsWith("<3>boot.labels:") && line.includes("the node is not reported ready")),
      "an error line says so",
    );
    t.notOk(
      booted.log.some((line) => line.startsWith("<5>boot.ready:")),
      "no boot.ready line",
    );
    t.ok(reloads >= 1, "docker was asked to reload");

    const info = await host.dockerd!.info();
    t.equal(info.DockerRootDir, booted.report?.dataRoot, "docker still runs on the cache volume");
    t.ok(info.DockerRootDir.startsWith(`${host.paths.mountRoot}/`), "(under the mount root)");
    t.notOk(labelRecord(info.Labels)[`${LABEL_PREFIX}.state`], "docker shows no state label at all");
    const volume = await bl.describe(volumeId);
    t.equal(
      volume.Attachments?.[0]?.InstanceId,
      host.instance.instanceId,
      "the volume stays attached to this instance",
    );
    const tags = await bl.tags(volumeId);
    t.notOk(tags[VolumeTag.lastError], "and is not blamed with a last-error tag");
    t.equal(tags[VolumeTag.claimedBy], host.instance.instanceId, "it stays claimed by this instance");
    const written = labelRecord(
      (JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as { labels?: string[] }).labels ?? [],
    );
    t.equal(
      written[`${LABEL_PREFIX}.state`],
      "degraded",
      "daemon.json says degraded: a later docker start never shows ready",
    );
  },
);
