/**
 * Workspace labels in the lab, against the EC2 emulator and a real private dockerd: a boot on a
 * workspace volume publishes the volume's recorded ids as `<prefix>.workspace.<key>` engine
 * labels next to osparc's own engine label (untouched), a pool boot publishes none, and the
 * release withdraws them with the rest of the prefix.
 */
import t from "tap";
import { readFile, writeFile } from "node:fs/promises";
import { labelRecord, LABEL_PREFIX, POOL, startBootLab } from "../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../fixtures/lab/lab-prereq.ts";
import { releaseHost, workspaceTags } from "../fixtures/lab/lifecycle-lab.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-docker-labels", poolSize: 1 });
t.teardown(() => bl.close());
const overrides = { pool: POOL };
/** An engine label of another owner, as an operator might set in daemon.json. */
const FOREIGN = "io.simcore.osparc-node-role=worker";

const agentLabels = (labels: string[]) =>
  Object.fromEntries(Object.entries(labelRecord(labels)).filter(([key]) => key.startsWith(`${LABEL_PREFIX}.`)));

t.test("a workspace boot publishes the volume's ids; a pool boot none; the release withdraws them", async (t) => {
  const ids = { userId: "user_42", projectId: "3fa85f64-5717-4562-b3fc-2c963f66afa6", nodeId: "n-1" };
  const host = await bl.addHost({ tags: workspaceTags(ids) });
  const daemon = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
  await writeFile(host.paths.daemonJson, JSON.stringify({ ...daemon, labels: [FOREIGN] }, null, 2) + "\n");

  const booted = await bl.boot(host, { overrides });
  t.equal(
    booted.report?.outcome,
    "ready",
    "ready on a workspace volume",
    booted.report?.outcome === "ready" ? {} : { log: booted.log.join("\n") },
  );
  const volumeId = booted.report!.volumeId!;
  const labels = (await host.dockerd!.info()).Labels;
  t.match(
    agentLabels(labels),
    {
      [`${LABEL_PREFIX}.state`]: "ready",
      [`${LABEL_PREFIX}.kind`]: "workspace",
      [`${LABEL_PREFIX}.volume-id`]: volumeId,
      [`${LABEL_PREFIX}.workspace.user-id`]: "user_42",
      [`${LABEL_PREFIX}.workspace.project-id`]: ids.projectId,
      [`${LABEL_PREFIX}.workspace.node-id`]: "n-1",
    },
    "docker info shows the workspace ids under the prefix",
  );
  t.ok(labels.includes(FOREIGN), "the other owner's engine label is still there");

  const released = await releaseHost(bl, host);
  t.equal(
    released.report?.outcome,
    "released",
    "released",
    released.report?.outcome === "released" ? {} : { log: released.log.join("\n") },
  );
  const after = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as { labels?: string[] };
  t.same(agentLabels(after.labels ?? []), {}, "no agent label left in daemon.json");
  t.ok((after.labels ?? []).includes(FOREIGN), "the other owner's label kept");

  const poolHost = await bl.addHost();
  const pool = await bl.boot(poolHost, { overrides });
  t.equal(
    pool.report?.outcome,
    "ready",
    "ready on a pool volume",
    pool.report?.outcome === "ready" ? {} : { log: pool.log.join("\n") },
  );
  const poolLabels = agentLabels((await poolHost.dockerd!.info()).Labels);
  t.equal(poolLabels[`${LABEL_PREFIX}.kind`], "pool");
  t.same(
    Object.keys(poolLabels).filter((key) => key.includes(".workspace.")),
    [],
    "a pool volume publishes no workspace ids",
  );
});
