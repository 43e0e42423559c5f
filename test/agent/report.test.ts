/**
 * The reporter's label read-back as pure logic over a fake manager: labels that do not show
 * after publishing are an error (the node is then not reported ready), labels that show pass.
 * The engine-label read-back against a real dockerd is in test/agent/boot/preflight.lab.test.ts.
 */
import t from "tap";
import { createReporter, labelDifferences, LabelsNotTakenError } from "../../src/agent/report.ts";
import { createMemoryLogger } from "../../src/log.ts";

const PREFIX = "io.simcore.ebs-cache";

t.test("read-back: node labels that do not take are an error, not `ready`", async (t) => {
  const written: Array<Record<string, string>> = [];
  let shown: Record<string, string> = { other: "x" };
  const engine = {
    info: async () => ({
      dockerRootDir: "/d",
      driver: "overlay2",
      imageStore: "graphdriver" as const,
      swarm: { nodeId: "n1", controlAvailable: true, state: "active" },
      labels: [],
    }),
    images: async () => [],
    nodeLabels: async () => shown,
    setNodeLabels: async (_id: string, add: Record<string, string>) => {
      written.push(add);
    },
  };
  const daemonConfig = {
    dataRoot: async () => undefined,
    setDataRoot: async () => undefined,
    setEngineLabels: async () => undefined,
    setImageStore: async () => undefined,
    restoreBackup: async () => undefined,
  };
  const report = createReporter({
    prefix: PREFIX,
    mode: "node",
    engine,
    daemonConfig,
    docker: undefined,
    log: createMemoryLogger(),
    readBackTimeoutMs: 300,
  });
  const error = await report("ready", { "volume-id": "vol-1" }).catch((e: unknown) => e);
  t.type(error, LabelsNotTakenError, "a manager that shows nothing: not taken");
  t.match((error as Error).message, /io\.simcore\.ebs-cache\.state missing/);
  t.same(written[0], { [`${PREFIX}.state`]: "ready", [`${PREFIX}.volume-id`]: "vol-1" });

  // A manager that applies the update: read back at once.
  engine.setNodeLabels = async (_id, add) => {
    shown = { ...shown, ...add };
  };
  await report("ready", { "volume-id": "vol-1" });
  t.same(
    labelDifferences(
      PREFIX,
      { ...shown, [`${PREFIX}.old`]: "1" },
      { [`${PREFIX}.state`]: "ready", [`${PREFIX}.volume-id`]: "vol-1" },
    ),
    [`${PREFIX}.old still there`],
  );
});

t.test("onPublished: told the labels of each report that took, never of one that did not", async (t) => {
  let shown: Record<string, string> = {};
  let applies = false;
  const engine = {
    info: async () => ({
      dockerRootDir: "/d",
      driver: "overlay2",
      imageStore: "graphdriver" as const,
      swarm: { nodeId: "n1", controlAvailable: true, state: "active" },
      labels: [],
    }),
    images: async () => [],
    nodeLabels: async () => shown,
    setNodeLabels: async (_id: string, add: Record<string, string>) => {
      if (applies) shown = { ...shown, ...add };
    },
  };
  const daemonConfig = {
    dataRoot: async () => undefined,
    setDataRoot: async () => undefined,
    setEngineLabels: async () => undefined,
    setImageStore: async () => undefined,
    restoreBackup: async () => undefined,
  };
  const told: Array<Record<string, string>> = [];
  const deps = {
    prefix: PREFIX,
    engine,
    daemonConfig,
    docker: undefined,
    log: createMemoryLogger(),
    readBackTimeoutMs: 200,
    onPublished: (labels: Record<string, string>) => void told.push(labels),
  };
  await t.rejects(createReporter({ ...deps, mode: "node" })("ready", { pool: "p" }), LabelsNotTakenError);
  t.same(told, [], "a report that did not take tells nothing");
  applies = true;
  await createReporter({ ...deps, mode: "node" })("warming", { pool: "p" });
  t.same(told, [{ [`${PREFIX}.state`]: "warming", [`${PREFIX}.pool`]: "p" }], "what took, as published");
  await createReporter({ ...deps, mode: "off" })("ready", {});
  t.equal(told.length, 1, "mode off publishes nothing and tells nothing");
});
