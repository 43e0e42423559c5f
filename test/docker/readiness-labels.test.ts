/**
 * The reporter's label read-back as pure logic over a fake manager: labels that do not show
 * after publishing are an error (the node is then not reported ready), labels that show pass.
 * The engine-label read-back against a real dockerd is in test/agent/boot/preflight.lab.test.ts.
 */
import t from "tap";
import {
  createLabelReader,
  createReporter,
  labelDifferences,
  LabelsNotTakenError,
} from "../../src/docker/readiness-labels.ts";
import { createMemoryLogger } from "../../src/log.ts";

const PREFIX = "io.simcore.ebs-cache";
const MANAGER = { nodeId: "n1", controlAvailable: true, state: "active" };

/** docker's API as the reporter asks it: `info()` with the swarm and the engine's labels, and the node's labels. */
function fakeEngine(docker: {
  swarm?: () => typeof MANAGER;
  engineLabels?: string[];
  nodeLabels: () => Record<string, string>;
  setNodeLabels?: (add: Record<string, string>) => void;
}) {
  return {
    info: async () => ({
      dockerRootDir: "/d",
      driver: "overlay2",
      imageStore: "graphdriver" as const,
      swarm: docker.swarm?.() ?? MANAGER,
      labels: docker.engineLabels ?? [],
    }),
    images: async () => [],
    nodeLabels: async () => docker.nodeLabels(),
    setNodeLabels: async (_id: string, add: Record<string, string>) => docker.setNodeLabels?.(add),
  };
}

/** daemon.json, never read back here: the node labels are the ones asked. */
const daemonConfig = {
  dataRoot: async () => undefined,
  setDataRoot: async () => undefined,
  setEngineLabels: async () => undefined,
  setImageStore: async () => undefined,
  restoreBackup: async () => undefined,
};

t.test("read-back: node labels that do not take are an error, not `ready`", async (t) => {
  const written: Array<Record<string, string>> = [];
  let shown: Record<string, string> = { other: "x" };
  let applies = false;
  const engine = fakeEngine({
    nodeLabels: () => shown,
    setNodeLabels: (add) => {
      written.push(add);
      if (applies) shown = { ...shown, ...add };
    },
  });
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
  applies = true;
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
  const engine = fakeEngine({
    nodeLabels: () => shown,
    setNodeLabels: (add) => {
      if (applies) shown = { ...shown, ...add };
    },
  });
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

t.test("createLabelReader: the agent's labels where the reporter puts them, under the prefix only", async (t) => {
  let swarm = MANAGER;
  const engine = fakeEngine({
    swarm: () => swarm,
    engineLabels: [`${PREFIX}.state=ready`, "other=1"],
    nodeLabels: () => ({ [`${PREFIX}.state`]: "warming", "user-id": "u1" }),
  });
  const read = (mode: "auto" | "node" | "engine" | "off") => createLabelReader({ prefix: PREFIX, mode, engine })();
  t.same(await read("auto"), { [`${PREFIX}.state`]: "warming" }, "a manager: its node's labels");
  t.same(await read("engine"), { [`${PREFIX}.state`]: "ready" }, "engine asked: the engine's");
  swarm = { nodeId: "", controlAvailable: false, state: "inactive" };
  t.same(await read("auto"), { [`${PREFIX}.state`]: "ready" }, "not in a swarm: the engine's");
  t.same(await read("node"), { [`${PREFIX}.state`]: "ready" }, "node asked but no node: the engine's");
  t.equal(await read("off"), undefined, "off: none published, none shown");
  engine.info = async () => {
    throw new Error("connect ENOENT /var/run/docker.sock");
  };
  await t.rejects(read("auto"), /ENOENT/, "a docker that does not answer: the caller decides");
});
