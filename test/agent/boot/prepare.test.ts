/**
 * The prepare-data-root step's decision (prepareVolumeDataRoot): the layout check on every run,
 * the cleanup once per activation, containerd's root only for a pool volume on the containerd
 * store, and a blank volume's empty data-root instead of a cleanup. The host's parts are
 * recorded calls; the marker is a real file in a temporary folder.
 */
import t from "tap";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { prepareVolumeDataRoot, type DataRootPorts } from "../../../src/agent/boot/activation-marker.ts";
import { volumeMarker } from "../../../src/host/volume-marker.ts";
import type { Activation } from "../../../src/agent/workspace-record.ts";
import { createMemoryLogger } from "../../../src/log.ts";

const activation: Activation = { instanceId: "i-0123456789abcdef0", launchTime: "2026-12-01T10:00:00.000Z" };

function recording(): { ports: DataRootPorts; calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    ports: {
      ...volumeMarker,
      checkLayout: async (root) => void calls.push(`layout ${root}`),
      clean: async (dataRoot, { kind, imageStore }) =>
        void calls.push(`clean ${dataRoot} ${kind} ${imageStore ?? "-"}`),
      cleanContainerdRoot: async (root) => void calls.push(`containerd ${root}`),
    },
  };
}

async function volume(test: { testdir(): string }, initialized = true): Promise<string> {
  const root = test.testdir();
  const dataRoot = join(root, "docker");
  if (initialized) await mkdir(join(dataRoot, "image"), { recursive: true });
  return dataRoot;
}

t.test(
  "a pool volume on the containerd store: layout, cleanup, containerd's root; a rerun only the layout",
  async (t) => {
    const dataRoot = await volume(t);
    const root = join(dataRoot, "..");
    const { ports, calls } = recording();
    const options = { kind: "pool" as const, activation, createdByAgent: false, imageStore: "containerd" as const };
    await prepareVolumeDataRoot(dataRoot, options, ports, createMemoryLogger());
    t.same(calls, [
      `layout ${join(root)}`,
      `clean ${dataRoot} pool containerd`,
      `containerd ${join(root, "containerd")}`,
    ]);
    calls.length = 0;
    await prepareVolumeDataRoot(dataRoot, options, ports, createMemoryLogger());
    t.same(calls, [`layout ${join(root)}`], "the same activation: its node state is kept, the layout checked again");
  },
);

t.test("a workspace volume: never containerd's root; graphdriver passes its store on", async (t) => {
  const dataRoot = await volume(t);
  const { ports, calls } = recording();
  await prepareVolumeDataRoot(
    dataRoot,
    { kind: "workspace", activation, createdByAgent: false, imageStore: "containerd" },
    ports,
    createMemoryLogger(),
  );
  t.same(calls.slice(1), [`clean ${dataRoot} workspace containerd`]);
  const other = await volume(t);
  const second = recording();
  await prepareVolumeDataRoot(
    other,
    { kind: "pool", activation, createdByAgent: false, imageStore: "graphdriver" },
    second.ports,
    createMemoryLogger(),
  );
  t.same(second.calls.slice(1), [`clean ${other} pool graphdriver`]);
});

t.test("a blank volume the agent made: the empty data-root, no cleanup; once docker ran on it, cleaned", async (t) => {
  const dataRoot = await volume(t, false);
  const { ports, calls } = recording();
  const options = { kind: "workspace" as const, activation, createdByAgent: true };
  await prepareVolumeDataRoot(dataRoot, options, ports, createMemoryLogger());
  t.equal(calls.length, 1, "only the layout check");

  const used = await volume(t, true);
  const again = recording();
  await prepareVolumeDataRoot(used, options, again.ports, createMemoryLogger());
  t.same(again.calls.slice(1), [`clean ${used} workspace -`]);
});

t.test("a layout refusal stops before any cleanup", async (t) => {
  const dataRoot = await volume(t);
  const { ports, calls } = recording();
  ports.checkLayout = async () => {
    throw new Error("a link where a folder belongs");
  };
  await t.rejects(
    prepareVolumeDataRoot(dataRoot, { kind: "pool", activation, createdByAgent: false }, ports, createMemoryLogger()),
    /a link/,
  );
  t.same(calls, []);
});
