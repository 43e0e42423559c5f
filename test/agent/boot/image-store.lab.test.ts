/**
 * The image store in the lab (the host's docker 20.10 on the graphdriver store, its daemon.json
 * asking for nothing else): pool volumes tagged `ebs-cache:image-store=containerd` are never
 * claimed; with only those in the pool the node degrades with the reason before any
 * AttachVolume. The containerd store itself runs in test/lab/machines/nspawn-containerd.lab.test.ts (docker 28).
 */
import t from "tap";
import { CreateTagsCommand } from "@aws-sdk/client-ec2";
import { ExitCode } from "../../../src/errors.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { POOL, startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-boot-image-store", poolSize: 2 });
t.teardown(() => bl.close());
const [graphdriverVolume, containerdVolume] = bl.poolVolumes as [string, string];

async function tagStore(volumeId: string, store: string): Promise<void> {
  await bl.ec2.send(
    new CreateTagsCommand({ Resources: [volumeId], Tags: [{ Key: VolumeTag.imageStore, Value: store }] }),
  );
}

t.test("the golden build recorded its store: the lab's pool volumes are graphdriver ones", async (t) => {
  t.equal((await bl.tags(graphdriverVolume))[VolumeTag.imageStore], "graphdriver");
  t.match(
    (await bl.tags(graphdriverVolume))[VolumeTag.engineVersion] ?? "",
    /^\d+\.\d+/,
    "with the builder's engine version",
  );
});

t.test("a graphdriver host claims the graphdriver volume and leaves the containerd one alone", async (t) => {
  await tagStore(containerdVolume, "containerd");
  const host = await bl.addHost();
  const booted = await bl.boot(host, { overrides: { pool: POOL } });
  t.equal(
    booted.report?.outcome,
    "ready",
    "ready",
    booted.report?.outcome === "ready" ? {} : { result: booted.report, log: booted.log.join("\n") },
  );
  t.same(
    booted.plan.selection.source === "pool" ? booted.plan.selection.candidates : [],
    [graphdriverVolume],
    "the containerd volume is no candidate",
  );
  t.equal(booted.plan.hostStore?.store, "graphdriver", "the host's store as observed from its daemon.json");
  t.match(booted.plan.hostStore?.engineVersion ?? "", /^\d+\.\d+/, "and its dockerd's version");
  t.equal(booted.report?.volumeId, graphdriverVolume);
  t.notOk(bl.attachCalls().includes(containerdVolume), "no AttachVolume for the containerd volume");
  t.equal((await bl.describe(containerdVolume)).State, "available");
});

t.test(
  "only volumes of the other store and no snapshot to fall back on: degraded before any AttachVolume",
  async (t) => {
    await tagStore(graphdriverVolume, "containerd");
    const host = await bl.addHost();
    const requests = bl.emulatorAttachRequests();
    const booted = await bl.boot(host, { overrides: { pool: POOL, createFromSnapshot: false } });
    t.equal(booted.report?.outcome, "degraded");
    t.equal(booted.exitCode, ExitCode.degraded);
    t.equal(booted.plan.selection.source, "none");
    t.match(
      booted.report?.reason ?? "",
      new RegExp(
        String.raw`no pool volume fits this host's image store: vol-\w+ was built ` +
          String.raw`with the containerd image store .* this host's dockerd uses ` +
          String.raw`the graphdriver store`,
      ),
    );
    t.equal(bl.emulatorAttachRequests(), requests, "the emulator got no AttachVolume");
    t.equal(
      (await host.dockerd!.info()).DockerRootDir,
      host.paths.defaultDataRoot,
      "docker up on its default data-root",
    );
  },
);
