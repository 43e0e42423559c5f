/**
 * The data-root's preparation marker (`<volume>/.ebs-cache-agent/prepared-for`): it names the
 * activation (instance id, EC2 LaunchTime, kernel boot id) the data-root was last prepared for,
 * and decides from the volume alone whether a run keeps the node state (a reboot or a rerun of
 * the same activation) or cleans it as a new tenant's (a start after a stop, another instance,
 * no proof). A clean interrupted anywhere is done again by the rerun.
 */
import t from "tap";
import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import {
  keepsNodeState,
  parsePreparedMarker,
  prepareOncePerActivation,
  preparedMarkerText,
} from "../../../src/agent/boot/activation-marker.ts";
import { volumeMarker } from "../../../src/host/volume-marker.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import type { Activation } from "../../../src/agent/workspace-record.ts";

const I = "i-0123456789abcdef0";
const OTHER = "i-0fedcba9876543210";
const L1 = "2026-12-01T10:00:00.000Z";
const L2 = "2026-12-01T12:00:00.000Z";
const first: Activation = { instanceId: I, launchTime: L1, bootId: "boot-1" };

/** Where a data-root's marker is on the volume, read here without the agent's help. */
const preparedMarkerPath = (dataRoot: string) => join(dirname(dataRoot), ".ebs-cache-agent", "prepared-for");

t.test(
  "keepsNodeState: a pool volume only for the same activation, a workspace volume for the same instance",
  async (t) => {
    const pool = (marker: Activation | undefined, now: Activation) => keepsNodeState("pool", marker, now);
    t.ok(pool(first, { ...first, bootId: "boot-2" }), "a reboot (same launch time, new boot id): kept");
    t.ok(pool(first, first), "a rerun: kept");
    t.notOk(
      pool(first, { ...first, launchTime: L2, bootId: "boot-2" }),
      "a start after a stop (another launch time): cleaned",
    );
    t.notOk(pool(first, { ...first, launchTime: L2 }), "another launch time wins over the same boot id");
    t.ok(pool(first, { instanceId: I, bootId: "boot-1" }), "launch time unknown now, same boot: kept");
    t.notOk(
      pool(first, { instanceId: I, bootId: "boot-2" }),
      "launch time unknown now, another boot: no proof, cleaned",
    );
    t.notOk(pool({ instanceId: I }, first), "an older agent's marker (the instance only): no proof, cleaned");
    t.notOk(pool({ ...first, instanceId: OTHER }, first), "another instance: cleaned");
    t.notOk(pool(undefined, first), "no marker: cleaned");
    const workspace = (marker: Activation | undefined, now: Activation) => keepsNodeState("workspace", marker, now);
    t.ok(
      workspace(first, { ...first, launchTime: L2, bootId: "boot-2" }),
      "a workspace volume on the same instance, a new activation: kept (its ids were checked before it was mounted)",
    );
    t.ok(workspace({ instanceId: I }, first), "an older agent's marker of this instance: kept");
    t.notOk(workspace({ ...first, instanceId: OTHER }, first), "another instance: cleaned");
    t.notOk(workspace(undefined, first), "no marker: cleaned");
  },
);

t.test(
  "the marker's text: JSON of the activation; an older agent's bare instance id; anything else names nothing",
  async (t) => {
    t.same(parsePreparedMarker(preparedMarkerText(first)), first, "read back");
    t.same(parsePreparedMarker(`${I}\n`), { instanceId: I }, "an older agent's marker");
    t.same(parsePreparedMarker(preparedMarkerText({ instanceId: I })), { instanceId: I }, "no launch time, no boot id");
    for (const text of [
      "",
      "garbage",
      "{}",
      "[]",
      "null",
      JSON.stringify({ instanceId: "i-x" }),
      JSON.stringify({ instanceId: 42 }),
    ]) {
      t.equal(parsePreparedMarker(text), undefined, `names nothing: ${JSON.stringify(text)}`);
    }
    t.same(
      parsePreparedMarker(JSON.stringify({ instanceId: I, launchTime: 7, bootId: "" })),
      { instanceId: I },
      "fields of the wrong type are not taken",
    );
  },
);

t.test(
  "prepareOncePerActivation: cleans for a new activation, keeps for a reboot, and a kill before the marker converges",
  async (t) => {
    const volume = t.testdir();
    const dataRoot = join(volume, "docker");
    await mkdir(dataRoot);
    const log = createMemoryLogger();
    let cleans = 0;
    const clean = async () => {
      cleans++;
    };
    const run = (activation: Activation, kind: "pool" | "workspace" = "pool") =>
      prepareOncePerActivation(dataRoot, { kind, activation }, clean, volumeMarker, log);

    t.equal(await run(first), "prepared", "first use: cleaned");
    t.same(
      parsePreparedMarker(await readFile(preparedMarkerPath(dataRoot), "utf8")),
      first,
      "the marker names this activation",
    );
    t.equal(await run(first), "already", "a rerun: kept");
    t.equal(await run({ ...first, bootId: "boot-2" }), "already", "a reboot: kept");
    t.same(
      parsePreparedMarker(await readFile(preparedMarkerPath(dataRoot), "utf8")),
      { ...first, bootId: "boot-2" },
      "the marker now names this boot, with the activation's launch time",
    );
    t.equal(
      await run({ instanceId: I, bootId: "boot-2" }),
      "already",
      "so a run of this boot that could not learn the launch time keeps it too",
    );
    t.equal(cleans, 1, "one clean so far");

    const started: Activation = { instanceId: I, launchTime: L2, bootId: "boot-3" };
    // A clean that dies half-way (a kill): the marker still names the earlier activation.
    await t.rejects(
      prepareOncePerActivation(
        dataRoot,
        { kind: "pool", activation: started },
        async () => Promise.reject(new Error("killed")),
        volumeMarker,
        log,
      ),
      /killed/,
    );
    t.equal(
      parsePreparedMarker(await readFile(preparedMarkerPath(dataRoot), "utf8"))?.launchTime,
      L1,
      "not marked after a failed clean",
    );
    t.equal(await run(started), "prepared", "the rerun decides the same: cleaned");
    t.equal(await run(started), "already", "then kept");
    t.equal(cleans, 2);
    t.same((await readdir(join(volume, ".ebs-cache-agent"))).sort(), ["prepared-for"], "no temp file left");

    t.equal(
      await run({ instanceId: I, launchTime: "2026-12-02T08:00:00.000Z" }, "workspace"),
      "already",
      "a workspace volume on this instance: kept over a new activation",
    );
    await writeFile(preparedMarkerPath(dataRoot), "not a marker\n");
    t.equal(await run(started), "prepared", "a marker that names nothing: cleaned");
    t.ok(
      log.lines.some((line) => /earlier activation of this instance/.test(line)),
      "the log says why it cleaned",
      { log: log.lines },
    );
  },
);
