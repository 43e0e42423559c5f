/**
 * `npm run lab -- --engine 28 --store containerd` (src/lab/demo/engine.ts): the lab demo on
 * docker 28 with the containerd image store, its host a systemd-nspawn machine of Debian sid
 * (the cached root file system of test/lab/machines/nspawn-boot.lab.test.ts, built on first use). Run once: the
 * golden snapshot built by that docker on that store, the claim under the machine's systemd,
 * docker and containerd on the volume, the image there without a pull, the labels, the release
 * at poweroff, and nothing left behind. First, the choice of engine and store (pure), including
 * the combinations the lab refuses before starting anything.
 *
 * Needs root, debootstrap, systemd-nspawn, the lab's tools and (the first time) Debian's archive.
 * It never skips: a machine that cannot run it fails it.
 */
import { existsSync } from "node:fs";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import t from "tap";
import {
  EngineChoiceError,
  chooseHostEngine,
  engineOfVersion,
  parseEngine,
  parseStore,
} from "../../../src/lab/docker/engine-choice.ts";
import { runEngineDemo } from "../../../src/lab/demo/engine.ts";
import { machineOwner } from "../../../src/lab/machines/nspawn.ts";
import { MACHINE_LAYERS, MACHINES, pidAlive } from "../../../src/lab/machines/nspawn-rootfs.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { assertDockerPrerequisites, assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";
import { assertNspawnPrerequisites } from "../../fixtures/lab/nspawn.ts";

t.test("the engine and store of a lab host", async (t) => {
  t.equal(parseEngine("20"), "20.10", "--engine 20 is bookworm's 20.10");
  t.equal(parseEngine("28"), "28");
  t.throws(() => parseEngine("29"), EngineChoiceError, "an engine the lab has no root file system for");
  t.throws(() => parseStore("overlay2"), EngineChoiceError, "overlay2 is a driver, not a store");
  t.equal(engineOfVersion("20.10.24+dfsg1"), "20.10");
  t.equal(engineOfVersion("28.5.2+dfsg4"), "28");
  t.equal(engineOfVersion("27.3.1"), undefined, "an engine the lab has none of");
  t.same(chooseHostEngine({}, "20.10.24+dfsg1"), { kind: "host" }, "no flags: today's demo on the host's dockerd");
  t.same(chooseHostEngine({ engine: "20.10" }, "20.10.24+dfsg1"), { kind: "host" }, "the host's own engine: the host");
  t.same(chooseHostEngine({ engine: "28", store: "containerd" }, "20.10.24+dfsg1"), {
    kind: "machine",
    engine: "28",
    store: "containerd",
  });
  t.same(chooseHostEngine({ engine: "28" }, "20.10.24+dfsg1"), { kind: "machine", engine: "28", store: "graphdriver" });
  t.same(
    chooseHostEngine({ store: "containerd" }, "28.5.2"),
    { kind: "machine", engine: "28", store: "containerd" },
    "the host's engine, but the host demo has the graphdriver store only",
  );
  t.throws(
    () => chooseHostEngine({ store: "containerd" }, "20.10.24+dfsg1"),
    /docker 20\.10 has no containerd image store/,
    "containerd on 20.10 is refused",
  );
  t.throws(() => chooseHostEngine({ engine: "20.10", store: "containerd" }, "28.5.2"), EngineChoiceError);
  t.throws(() => chooseHostEngine({}, undefined), /no --engine was given/, "no dockerd here and no engine named");
  try {
    chooseHostEngine({ engine: "20.10", store: "containerd" }, undefined);
  } catch (error) {
    t.match((error as EngineChoiceError).remediation, /--engine 26 or 28/, "the refusal says what to run instead");
  }
});

t.test("the demo on docker 28 with the containerd image store", async (t) => {
  await assertLabPrerequisites();
  assertDockerPrerequisites("the engine demo");
  await assertNspawnPrerequisites();
  const machinesBefore = new Set(await readdir(MACHINES).catch((): string[] => []));
  const lines: string[] = [];
  const log = createMemoryLogger("debug");
  await runEngineDemo({
    engine: "28",
    store: "containerd",
    pool: "engine-demo",
    poolSize: 2,
    imageMiB: 4,
    log,
    out: (line) => lines.push(line),
  });
  const text = lines.join("\n");
  t.comment(text);
  const has = (pattern: RegExp, message: string) => t.match(text, pattern, message, { timeline: text });
  has(
    /golden snapshot: snap-[0-9a-f]+ .* built by docker 28\.\S+ on the containerd image store/,
    "the golden snapshot is built by docker 28 on the containerd store",
  );
  has(
    /boots .* as machine ebs-nspawn-[0-9a-f]+: docker 28 \(sid\), containerd image store/,
    "the host is a docker 28 machine",
  );
  has(/^outcome: ready \(source pool\)$/m, "the boot is ready on a pool volume");
  const volume = /^volume (vol-[0-9a-f]+) on \/dev\/loop\d+ at \/var\/lib\/ebs-cache\/(vol-[0-9a-f]+)$/m.exec(text);
  t.ok(volume && volume[1] === volume[2], "the claimed volume is mounted at its mount point", { found: volume?.[0] });
  const id = volume?.[1] ?? "none";
  has(/^ +claim-volume +\d/m, "the timeline has the claim");
  has(/^ +mount +\d/m, "and the mount");
  has(/^docker 28\.\S+, image store containerd \(driver overlayfs\)$/m, "docker 28 on the containerd store");
  t.match(
    text,
    new RegExp(`^docker data-root: /var/lib/ebs-cache/${id}/docker$`, "m"),
    "docker's data-root on the volume",
  );
  t.match(
    text,
    new RegExp(`^containerd root: /var/lib/ebs-cache/${id}/containerd$`, "m"),
    "containerd's root on the volume",
  );
  has(/^ +io\.simcore\.ebs-cache\.state=ready$/m, "the ready label");
  has(/^lab\/app +1 /m, "docker image ls shows the golden image");
  has(/--pull=never lab\/app:1 echo … {2}-> {2}hello from the cache volume$/m, "it runs without a pull");
  t.match(
    text,
    new RegExp(`^release: ${id} available, ebs-cache:released-at=\\d{4}-`, "m"),
    "the poweroff released it",
  );
  t.match(lines.at(-1), /total +\d/, "the timeline closes");
  has(/^ +lab down +\d/m, "the lab is torn down");
  const root = /lab root: (\S+)/.exec(text)?.[1];
  t.ok(root && !existsSync(root), "its root is gone", { root });
  // Another test file running beside this one may have a machine of its own there: a machine
  // whose owner (src/lab/machines/nspawn.ts writes it first) is another live process is not the demo's.
  const left = [];
  for (const name of (await readdir(MACHINES).catch((): string[] => [])).filter((name) => !machinesBefore.has(name))) {
    const owner = await machineOwner(join(MACHINES, name));
    if (existsSync(join(MACHINES, name)) && !(owner > 0 && owner !== process.pid && pidAlive(owner))) left.push(name);
  }
  t.same(left, [], "no machine left behind");
  // A machine's layers go with it (src/lab/machines/nspawn.ts removes the folder, then its layers).
  const orphans = (await readdir(MACHINE_LAYERS).catch((): string[] => [])).filter(
    (name) => !machinesBefore.has(name) && !existsSync(join(MACHINES, name)),
  );
  t.same(orphans, [], "no machine's layers left behind");
});
