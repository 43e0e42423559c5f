/**
 * Docker is never moved to another data-root after the node joined the swarm, whatever order
 * the distribution's units run in. On Debian cloud-final (osparc's user data: the join) is
 * After=multi-user.target, so it runs after both agent phases; where it is not (Amazon Linux,
 * RHEL) the join may come before the agent. Here docker starts on its default data-root and joins
 * a swarm first, then phase 1 prepares a pool volume and phase 2 runs: phase 2 must leave docker
 * as it is (same process, same root, same swarm node), put daemon.json back, and degrade.
 */
import t from "tap";
import { readFile } from "node:fs/promises";
import { bootLabHost } from "../../../src/lab/machines/agent.ts";
import { initSwarm } from "../../../src/lab/docker/images.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { POOL, startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();
const bl = await startBootLab({ name: "test-join-order", poolSize: 1 });
t.teardown(() => bl.close());

t.test("joined before the agent: phase 2 does not switch docker after the join", async (t) => {
  const host = await bl.addHost();
  const dockerd = await host.startDocker();
  const nodeId = await initSwarm(dockerd);
  const pid = dockerd.pid;
  const overrides = { pool: POOL };

  const phase1 = await bootLabHost(bl.lab, host, { overrides, log: createMemoryLogger("debug"), withDocker: false });
  t.equal(phase1.report?.outcome, "prepared", "phase 1 prepared the pool volume", { result: phase1.report });
  const volumeId = phase1.report!.volumeId!;

  const log = createMemoryLogger("debug");
  const phase2 = await bootLabHost(bl.lab, host, { overrides, log, mayClaim: false });
  t.equal(phase2.report?.outcome, "degraded", "phase 2: degraded", { log: log.lines.join("\n") });
  t.match(phase2.report?.reason, /in a swarm \(active\): not moved to the cache volume after the join/);
  const info = await dockerd.info();
  t.equal(dockerd.pid, pid, "docker was not restarted");
  t.equal(info.DockerRootDir, host.paths.defaultDataRoot, "docker still on its default data-root");
  t.equal(info.Swarm.LocalNodeState, "active", "still in the swarm");
  t.equal(info.Swarm.NodeID, nodeId, "as the same node");
  const daemonJson = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
  t.equal(daemonJson["data-root"], host.paths.defaultDataRoot, "daemon.json back on the root docker runs on");
  t.notOk((await bl.tags(volumeId))[VolumeTag.lastError], "the volume is not quarantined: it is not its fault");
  await dockerd.stop();
});
