/**
 * `snapshot build`'s plan (pure) and its runner with in-memory steps: what a build does in which
 * order, what it refuses before doing anything, and what a failing step leaves (nothing it set up).
 */
import t from "tap";
import {
  runVolumeBuild,
  VolumeBuildError,
  type BuildDocker,
  type VolumeBuildDeps,
} from "../../../src/agent/snapshot/build.ts";
import { describeStep, planBuild, type BuildRequest } from "../../../src/agent/snapshot/build-plan.ts";
import { parseImageSetRecord } from "../../../src/agent/snapshot/image-set-record.ts";
import { StopSignalReceived } from "../../../src/errors.ts";
import { createMemoryLogger } from "../../../src/log.ts";

const request: BuildRequest = {
  target: { image: "/b/gen.img", sizeGiB: 4 },
  workDir: "/b/gen.img.build",
  images: ["registry.example.org/app:1", "tool:2"],
  load: ["/b/app.tar"],
  pull: true,
  imageStore: "graphdriver",
  recordReads: true,
};

function stepsOf(r: BuildRequest): string[] {
  const planned = planBuild(r);
  if ("problems" in planned) throw new Error(planned.problems.join("; "));
  return planned.steps.map((s) => s.step);
}

t.test("a new image: created, attached, formatted, built, stripped, identified, detached", async (t) => {
  t.same(stepsOf(request), [
    "clean-leftovers",
    "create-image",
    "attach-loop",
    "format",
    "mount",
    "start-dockerd",
    "load",
    "ensure-image",
    "ensure-image",
    "remove-other-images",
    "record-reads",
    "record-reads",
    "stop-dockerd",
    "strip-machine-local-state",
    "record-image-set",
    "unmount",
    "identify",
    "detach-loop",
  ]);
  const planned = planBuild(request);
  t.ok(
    "steps" in planned &&
      planned.steps.some((s) => describeStep(s) === `create-image image=/b/gen.img bytes=${4 * 1024 ** 3}`),
  );
  t.ok(
    "steps" in planned &&
      planned.steps.some(
        (s) =>
          describeStep(s) ===
          "start-dockerd root=/b/gen.img.build/d dataRoot=/b/gen.img.build/mnt/docker imageStore=graphdriver",
      ),
  );
});

t.test("a next generation copies the previous image: no mkfs, the old need list cleared", async (t) => {
  const steps = stepsOf({ ...request, target: { image: "/b/gen2.img", sizeGiB: 4, parentImage: "/b/gen.img" } });
  t.ok(steps.includes("copy-image"));
  t.notOk(steps.includes("create-image"));
  t.notOk(steps.includes("format"), "a fresh file system would move every block");
  t.ok(steps.indexOf("clear-need-list") > steps.indexOf("mount"));
  t.ok(steps.indexOf("grow") === steps.indexOf("mount") + 1, "grown into a larger size right after the mount");
});

t.test("a device somebody else attached: no image, no loop, still identified", async (t) => {
  const steps = stepsOf({ ...request, target: { device: "/dev/loop7" }, recordReads: false });
  t.notOk(steps.includes("attach-loop") || steps.includes("detach-loop") || steps.includes("create-image"));
  t.notOk(steps.includes("record-reads"));
  t.equal(steps.at(-1), "identify");
});

t.test("the containerd store: the same steps, the need list too, stripped as that store", async (t) => {
  const containerd = { ...request, imageStore: "containerd" as const };
  const steps = stepsOf(containerd);
  t.same(steps, stepsOf(request), "each image's reads recorded (the list names files of containerd's root)");
  t.notOk(stepsOf({ ...containerd, recordReads: false }).includes("record-reads"), "unless left out");
  const planned = planBuild(containerd);
  const described = "steps" in planned ? planned.steps.map(describeStep) : [];
  t.ok(
    described.includes(
      "start-dockerd root=/b/gen.img.build/d dataRoot=/b/gen.img.build/mnt/docker imageStore=containerd",
    ),
  );
  t.ok(described.includes("strip-machine-local-state dataRoot=/b/gen.img.build/mnt/docker imageStore=containerd"));
});

t.test("bad requests are refused whole, with every problem", async (t) => {
  const planned = planBuild({
    ...request,
    images: ["Bad Ref", "tool:2", "tool:2"],
    workDir: "relative",
    target: { image: "/b/x.img", sizeGiB: 0, parentImage: "/b/x.img" },
  });
  t.ok("problems" in planned);
  const problems = "problems" in planned ? planned.problems.join("\n") : "";
  for (const pattern of [/Bad Ref|lowercase|reference/, /named twice/, /absolute/, /0 GiB/, /parent image is/])
    t.match(problems, pattern);
  t.match(planBuild({ ...request, images: [] }), { problems: [/no images/] });
});

/** Deps that record what ran, failing at `failAt`. */
function fakeDeps(failAt?: string): { deps: VolumeBuildDeps; calls: string[] } {
  const calls: string[] = [];
  const step = (name: string) => async () => {
    calls.push(name);
    if (name === failAt) throw new Error(`${name} failed`);
  };
  const docker: BuildDocker = {
    engineVersion: "28.5.1",
    imageStore: "graphdriver",
    load: step("load"),
    has: async (image) => (calls.push(`has ${image}`), image === "tool:2"),
    pull: async (image) => void calls.push(`pull ${image}`),
    removeAllBut: async () => (calls.push("remove-others"), 1),
    recordReads: async (image) => (calls.push(`record ${image}`), ["docker/overlay2/x/diff/bin/sh"]),
    stop: step("stop-dockerd"),
  };
  const deps: VolumeBuildDeps = {
    cleanLeftovers: step("clean"),
    claimImageFile: step("claim"),
    releaseImageFile: step("release"),
    discardImageFile: step("discard"),
    createImage: step("create"),
    copyImage: step("copy"),
    grow: step("grow"),
    attachLoop: async () => (calls.push("attach"), "/dev/loop9"),
    detachLoop: step("detach"),
    format: step("format"),
    mount: step("mount"),
    unmount: step("unmount"),
    clearNeedList: step("clear"),
    writeNeedList: step("write-reads"),
    startDockerd: async () => (calls.push("start-dockerd"), docker),
    stripMachineLocalState: async () => (calls.push("strip"), ["swarm", "engine-id"]),
    writeImageSetRecord: async (_mountPoint, text) => void calls.push(`record-image-set ${text}`),
    identify: step("identify"),
    log: createMemoryLogger(),
  };
  return { deps, calls };
}

t.test("the runner: a whole build, the absent image pulled, the report for the upload", async (t) => {
  const { deps, calls } = fakeDeps();
  const planned = planBuild(request);
  if (!("steps" in planned)) throw new Error("no plan");
  const report = await runVolumeBuild(deps, request, planned.steps);
  t.ok(calls.includes("pull registry.example.org/app:1"), "what no tarball held is pulled");
  t.notOk(calls.includes("pull tool:2"), "what a tarball held is not");
  t.same(report.needList, request.images);
  t.match(report, { engineVersion: "28.5.1", imageStore: "graphdriver", removedImages: 1, stripped: 2 });
  const recorded = calls.find((c) => c.startsWith("record-image-set "));
  t.same(
    parseImageSetRecord(recorded?.slice("record-image-set ".length) ?? ""),
    { images: request.images, imageStore: "graphdriver", engineVersion: "28.5.1" },
    "the image set, its store and the engine that built it are recorded on the image, for the upload to check",
  );
  t.ok(calls.indexOf(recorded!) > calls.indexOf("strip") && calls.indexOf(recorded!) < calls.indexOf("unmount"));
  t.equal(calls.at(-1), "release", "the image is released as finished last");
});

t.test("the runner: a failing step undoes what was set up, in reverse, and keeps the image claimed", async (t) => {
  const { deps, calls } = fakeDeps("load");
  const planned = planBuild(request);
  if (!("steps" in planned)) throw new Error("no plan");
  await t.rejects(runVolumeBuild(deps, request, planned.steps), /load failed/);
  t.same(calls.slice(calls.indexOf("load")), ["load", "stop-dockerd", "unmount", "detach"]);
  t.notOk(calls.includes("release"), "a rerun may replace the half-made image");
  t.notOk(calls.includes("discard"), "which is kept");
});

t.test("the runner: a full disk is told as one, with what to free, and the half-made image goes", async (t) => {
  const { deps, calls } = fakeDeps();
  deps.createImage = async () => void calls.push("create");
  const full = Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
  deps.format = async () => {
    calls.push("format");
    throw full;
  };
  const planned = planBuild(request);
  if (!("steps" in planned)) throw new Error("no plan");
  const error = await runVolumeBuild(deps, request, planned.steps).catch((e: unknown) => e);
  t.type(error, VolumeBuildError, "a typed error, not the agent's bug");
  t.match((error as VolumeBuildError).message, /^no space left during format: ENOSPC.*the half-made image is removed/);
  t.match((error as VolumeBuildError).remediation, /free space on the filesystem of \/.* \(df -h .*--size-gib/);
  t.same(calls.slice(calls.indexOf("format")), ["format", "detach", "discard"], "undone, then the image removed");

  // Before the image exists (its folder full at the claim): nothing to remove.
  const early = fakeDeps();
  early.deps.claimImageFile = async () => {
    throw full;
  };
  await t.rejects(runVolumeBuild(early.deps, request, planned.steps), /^no space left during clean-leftovers/);
  t.notOk(early.calls.includes("discard"));
});

t.test("the runner: without pulling, an image no tarball held fails the build", async (t) => {
  const { deps, calls } = fakeDeps();
  const offline = { ...request, pull: false };
  const planned = planBuild(offline);
  if (!("steps" in planned)) throw new Error("no plan");
  await t.rejects(
    runVolumeBuild(deps, offline, planned.steps),
    /registry\.example\.org\/app:1 is in none of the tarballs/,
  );
  t.notOk(calls.some((c) => c.startsWith("pull")));
  t.same(calls.slice(-3), ["stop-dockerd", "unmount", "detach"]);
});

t.test("the runner: SIGTERM during a pull stops the pull, undoes, and says it was stopped", async (t) => {
  const { deps, calls } = fakeDeps();
  const controller = new AbortController();
  // A pull that takes long (a big image, a slow registry) unless its signal stops it.
  deps.startDockerd = async () => {
    calls.push("start-dockerd");
    return {
      ...(await fakeDeps().deps.startDockerd("", "", "graphdriver")),
      pull: async (image, signal) => {
        calls.push(`pull ${image}`);
        controller.abort(new StopSignalReceived("SIGTERM"));
        const stopped = await new Promise<boolean>((resolve) => {
          const timer = setTimeout(() => resolve(false), 2_000);
          const stop = () => (clearTimeout(timer), resolve(true));
          if (signal?.aborted) stop();
          else signal?.addEventListener("abort", stop, { once: true });
        });
        calls.push(stopped ? "pull stopped" : "pull done");
        if (stopped) throw new Error("docker pull: killed by SIGTERM");
      },
      stop: async () => void calls.push("stop-dockerd"),
    };
  };
  const planned = planBuild(request);
  if (!("steps" in planned)) throw new Error("no plan");
  await t.rejects(runVolumeBuild({ ...deps, signal: controller.signal }, request, planned.steps), {
    message: /stopped by SIGTERM during ensure-image/,
    exitCode: 1,
  });
  t.ok(calls.includes("pull stopped"), "the pull was given the stop, not waited for");
  t.same(calls.slice(-3), ["stop-dockerd", "unmount", "detach"], "what was set up is undone");
});

t.test("the runner: SIGINT (Ctrl-C) between steps stops the build, undoes, and names it", async (t) => {
  const { deps, calls } = fakeDeps();
  const controller = new AbortController();
  deps.mount = async () => {
    calls.push("mount");
    controller.abort(new StopSignalReceived("SIGINT"));
  };
  const planned = planBuild(request);
  if (!("steps" in planned)) throw new Error("no plan");
  await t.rejects(runVolumeBuild({ ...deps, signal: controller.signal }, request, planned.steps), {
    message: /^stopped by SIGINT$/,
  });
  t.same(calls.slice(-2), ["unmount", "detach"]);
  t.notOk(calls.includes("start-dockerd"));
});

t.test("the runner: the progress line tells step k of n, a pull's bytes, and the end", async (t) => {
  const { deps } = fakeDeps();
  const log = createMemoryLogger();
  const drawn: string[] = [];
  let clock = 0;
  deps.log = log;
  deps.now = () => (clock += 1000);
  deps.progress = { terminal: { show: (text) => void drawn.push(text), clear: () => void drawn.push("") } };
  deps.startDockerd = async () => ({
    ...(await fakeDeps().deps.startDockerd("", "", "graphdriver")),
    pull: async (_image, _signal, onBytes) => {
      onBytes?.({ done: 0, total: 2 * 1024 ** 3 });
      onBytes?.({ done: 1024 ** 3, total: 2 * 1024 ** 3 });
    },
  });
  const planned = planBuild(request);
  if (!("steps" in planned)) throw new Error("no plan");
  await runVolumeBuild(deps, request, planned.steps);
  const n = planned.steps.length;
  const pullAt = planned.steps.findIndex((s) => s.step === "ensure-image" && s.image === "registry.example.org/app:1");
  t.ok(log.lines.includes(`<6>snapshot.progress: step 1 of ${n}, clean-leftovers`), "the first step is logged");
  t.ok(
    log.lines.some((l) =>
      l.startsWith(
        `<6>snapshot.progress: step ${pullAt + 1} of ${n}, ensure-image registry.example.org/app:1: ` +
          "100.0 % (2 GiB of 2 GiB), ",
      ),
    ),
    "the pull's end, its bytes all done",
  );
  t.match(
    drawn.find((d) => d.includes("50.0 %")),
    /ensure-image registry\.example\.org\/app:1: 50\.0 % \(1 GiB of 2 GiB\), 1024\.0 MiB\/s, ETA 1s$/,
    "the pull's bytes, rate and ETA on the terminal's line",
  );
  t.ok(log.lines.at(-2)?.startsWith(`<6>snapshot.progress: step ${n} of ${n}, `), "the end is logged");
  t.equal(drawn.at(-1), "", "the terminal's line is cleared at the end");
});
