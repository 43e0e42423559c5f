/**
 * `release` on the lab: idempotent (a second release does nothing and changes nothing); a release
 * killed between DetachVolume and the tags is finished by the next one; a busy mount refuses the
 * release (nothing detached, never forced) until the process holding it ends; docker still
 * running on the volume is stopped, or the release refused with release.stopDocker=false; a
 * disabled instance attaches nothing at boot and releases nothing; a filesystem still mounted in
 * another mount namespace after the unmount is waited for (timeouts.mountHolderSeconds): released
 * once that namespace is gone, refused when it stays past the bound. A namespace made outside this
 * lab file (another lab's container) never holds a copy: each lab file has a mount namespace of its
 * own (test/fixtures/lab/lab-namespace.ts). The claim's and the release's times are EC2's when the
 * host's clock is days off.
 */
import t, { type Test } from "tap";
import { spawn } from "node:child_process";
import { readFile, readlink } from "node:fs/promises";
import { join } from "node:path";
import type { ReleasePlan } from "../../../src/agent/release/plan.ts";
import { filesystemLiveness as liveness } from "../../../src/host/mount-namespaces.ts";
import { DATA_ROOT_SUBDIR } from "../../../src/layout.ts";
import type { LabHost } from "../../../src/lab/lab.ts";
import { bootLabHost } from "../../../src/lab/machines/agent.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { initSwarm } from "../../../src/lab/docker/images.ts";
import { VolumeTag } from "../../../src/tags.ts";
import {
  findmnt,
  labelRecord,
  LABEL_PREFIX,
  mountsUnder,
  POOL,
  startBootLab,
  closeLabLeavingNothing,
} from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";
import { waitFor } from "../../fixtures/fakes/cloud.ts";
import {
  mutatingCalls,
  releaseCli,
  releaseHost,
  startReleaseCli,
  volumeEnd,
} from "../../fixtures/lab/lifecycle-lab.ts";
import { assertOutcome, ISO_TIME } from "../../fixtures/lab/lifecycle-lab.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-lifecycle-release", poolSize: 4 });
t.teardown(() => bl.close());
const overrides = { pool: POOL };

/** Boots a fresh host on a pool volume; returns it with the volume and its mount point. */
async function bootedHost(
  t: Test,
  tags: Record<string, string> = {},
): Promise<{ host: LabHost; volumeId: string; mountPoint: string }> {
  const host = await bl.addHost({ tags });
  const booted = await bl.boot(host, { overrides });
  assertOutcome(t, booted, "ready", "boot: ready");
  return { host, volumeId: booted.report!.volumeId!, mountPoint: booted.report!.mountPoint! };
}

/** The node's own labels under the agent's prefix (docker must be a swarm manager). */
async function nodeLabels(host: LabHost): Promise<Record<string, string>> {
  const { stdout } = await host.dockerd!.docker(["node", "inspect", "self", "--format", "{{json .Spec.Labels}}"]);
  const labels = (JSON.parse(stdout) as Record<string, string> | null) ?? {};
  return Object.fromEntries(
    Object.entries(labels)
      .filter(([key]) => key.startsWith(`${LABEL_PREFIX}.`))
      .map(([key, value]) => [key.slice(LABEL_PREFIX.length + 1), value]),
  );
}

/** Everything on the host a release could change. */
async function hostState(host: LabHost) {
  return {
    daemonJson: await readFile(host.paths.daemonJson, "utf8"),
    mounts: await mountsUnder(host.paths.mountRoot),
    devices: bl.lab.backend
      .attachments()
      .filter((a) => a.instanceId === host.instance.instanceId)
      .map((a) => a.volumeId),
    dockerPid: host.dockerd?.pid,
  };
}

/** The volume is released: available, unattached, never forced, released-at / expires-at, no claim. */
function assertReleasedTags(t: Test, end: Awaited<ReturnType<typeof volumeEnd>>): void {
  t.equal(end.state, "available", "available");
  t.same(end.attachments, [], "no attachment");
  t.equal(end.forceDetachCount, 0, "never force-detached");
  t.match(end.tags[VolumeTag.releasedAt], ISO_TIME, "released-at");
  t.equal(
    Date.parse(end.tags[VolumeTag.expiresAt] ?? ""),
    Date.parse(end.tags[VolumeTag.releasedAt] ?? "") + 24 * 3_600_000,
    "expires-at = released-at + ttlHours (24)",
  );
  t.notOk(end.tags[VolumeTag.claimedBy], "claimed-by removed");
  t.notOk(end.tags[VolumeTag.claimedAt], "claimed-at removed");
}

t.test(
  "release twice: the first releases, the second finds nothing to do and changes nothing (exit 0 both)",
  async (t) => {
    const { host, volumeId } = await bootedHost(t);
    await host.dockerd!.stop(); // systemd stops docker.service before the agent's ExecStop
    const first = await releaseHost(bl, host);
    assertOutcome(t, first, "released", "first release: released");
    t.equal(first.exitCode, 0, "exit code 0");
    t.equal(first.plan.decision, "release");
    t.same(
      first.plan.steps.map((s) => s.step),
      ["withdraw-labels", "reset-data-root", "sync", "unmount", "detach", "wait-detached", "tag-released"],
      "the shutdown plan",
    );
    const end = await volumeEnd(bl, volumeId);
    assertReleasedTags(t, end);
    const host1 = await hostState(host);
    t.same(host1.mounts, [], "unmounted");
    t.same(host1.devices, [], "the device is gone from the host");
    const daemon = JSON.parse(host1.daemonJson) as Record<string, unknown>;
    t.equal(daemon["data-root"], host.paths.defaultDataRoot, "daemon.json data-root reset to the host's default");
    t.same(
      daemon.labels,
      [],
      "the agent's engine labels (state=ready) withdrawn: a docker started later does not claim ready",
    );

    const calls = bl.calls.length;
    const second = await releaseHost(bl, host);
    t.equal(second.exitCode, 0, "second release: exit code 0");
    assertOutcome(t, second, "nothing", "second release: nothing to do");
    t.same(second.plan.steps, [], "no step planned");
    t.same(mutatingCalls(bl, calls), [], "no EC2 call that changes anything");
    t.same(await volumeEnd(bl, volumeId), end, "the volume's end state is the same (tags included)");
    t.same(await hostState(host), host1, "the host's end state is the same");

    // And docker started later on this host comes up on its default root, without the ready label.
    const dockerd = await host.startDocker();
    const info = await dockerd.info();
    t.equal(
      info.DockerRootDir,
      host.paths.defaultDataRoot,
      "a docker started after the release runs on its default root",
    );
    t.notOk(labelRecord(info.Labels)[`${LABEL_PREFIX}.state`], "and shows no readiness label");
    await dockerd.stop();
  },
);

t.test(
  "a release killed between detach and tagging: the volume is left available and claimed; the next release " +
    "finishes the tags",
  async (t) => {
    const { host, volumeId } = await bootedHost(t);
    const instanceId = host.instance.instanceId;
    await host.dockerd!.stop();
    const before = await hostState(host);

    const dry = await releaseCli(bl, host, ["--dry-run"]);
    t.equal(dry.exitCode, 0, "release --dry-run: exit 0", { stderr: dry.stderr });
    t.match(dry.stdout, `decision: release: ${volumeId}`);
    t.match(dry.stdout, "plan (dry run, nothing changed):");
    t.same(
      [...dry.stdout.matchAll(/^\s+\d+\. (\S+)/gm)].map((m) => m[1]),
      ["withdraw-labels", "reset-data-root", "sync", "unmount", "detach", "wait-detached", "tag-released"],
      "the steps are listed",
    );
    t.same(await hostState(host), before, "the dry run changed nothing on the host");
    t.equal((await volumeEnd(bl, volumeId)).state, "in-use", "nor in EC2");

    // Every CreateTags is refused (throttled, nothing applied) from now on: the CLI detaches, then
    // retries its tags; it is killed (SIGKILL) as soon as it logged the detach, before any tag.
    bl.lab.ec2.setFaults({ actions: { CreateTags: { throttleRate: 1 } } });
    const cli = await startReleaseCli(bl, host, []);
    const detached = await cli.waitForLine(/^<\d>release\.detached:/);
    cli.kill("SIGKILL");
    const killed = await cli.done;
    bl.lab.ec2.setFaults({});
    t.ok(detached, "the release process logged the detach", { stderr: cli.lines.join("\n") });
    t.equal(killed.signal, "SIGKILL", "then it was killed");
    t.notOk(
      cli.lines.some((line) => line.includes("release.tagged")),
      "before tagging",
    );

    const crashed = await volumeEnd(bl, volumeId);
    t.equal(crashed.state, "available", "after the crash the volume is available (detached)");
    t.same(crashed.attachments, []);
    t.equal(crashed.tags[VolumeTag.claimedBy], instanceId, "still claimed-by this instance");
    t.notOk(crashed.tags[VolumeTag.releasedAt], "no released-at");
    t.notOk(crashed.tags[VolumeTag.expiresAt], "no expires-at");

    const json = await releaseCli(bl, host, ["--json"]);
    t.equal(json.exitCode, 0, "the next release: exit 0", { stderr: json.stderr });
    const printed = JSON.parse(json.stdout) as { plan: ReleasePlan; result: { outcome: string; released: string[] } };
    t.equal(printed.plan.decision, "release");
    t.same(
      printed.plan.steps.map((s) => s.step),
      ["tag-released"],
      "it finds the volume available but claimed: only the tags are left to do",
    );
    t.same(printed.result.released, [volumeId]);
    const end = await volumeEnd(bl, volumeId);
    assertReleasedTags(t, end);
    t.same(await mountsUnder(host.paths.mountRoot), [], "nothing mounted");

    const again = await releaseCli(bl, host, []);
    t.equal(again.exitCode, 0, "and a third release: exit 0");
    t.match(again.stdout, /^decision: nothing \(no cache volume is attached/m, "with nothing to do");
    t.match(again.stdout, /^outcome: nothing$/m);
    t.same(await volumeEnd(bl, volumeId), end, "same end state");
  },
);

t.test(
  "a busy mount (a process with its cwd on the volume) refuses the release: nothing detached or tagged, never " +
    "forced; once it ends the release succeeds",
  async (t) => {
    const { host, volumeId, mountPoint } = await bootedHost(t);
    await host.dockerd!.stop();
    const holder = spawn("sleep", ["600"], { cwd: join(mountPoint, DATA_ROOT_SUBDIR), stdio: "ignore" });
    const exited = new Promise<void>((resolve) => holder.once("exit", () => resolve()));
    t.teardown(() => void holder.kill("SIGKILL"));
    t.ok(holder.pid, "a process holds the mount");

    const calls = bl.calls.length;
    const refused = await releaseHost(bl, host);
    assertOutcome(t, refused, "refused", "release refused");
    t.equal(refused.exitCode, 1, "exit code 1");
    const problem = refused.report?.problems[0];
    t.equal(problem?.step, "unmount", "at the unmount");
    t.match(
      problem?.message,
      /could not be unmounted.*stays attached and untagged: a mounted volume is never detached/,
      "a clear error",
    );
    t.match(problem?.remediation, /fuser -vm/, "that says how to find the process");
    t.ok(
      refused.log.some((line) => line.startsWith("<3>release.refused:")),
      "logged as an error",
    );
    t.same(
      refused.report?.timeline.filter((s) => s.skipped).map((s) => s.step),
      ["detach", "wait-detached", "tag-released"],
      "detach and tags skipped",
    );
    t.same(mutatingCalls(bl, calls), [], "no DetachVolume, no tag change");
    const stuck = await volumeEnd(bl, volumeId);
    t.equal(stuck.state, "in-use", "the volume stays attached");
    t.same(stuck.attachments, [`attached ${host.instance.instanceId}`]);
    t.equal(stuck.forceDetachCount, 0, "forceDetachCount 0");
    t.equal(stuck.tags[VolumeTag.claimedBy], host.instance.instanceId, "still claimed");
    t.notOk(stuck.tags[VolumeTag.releasedAt], "not tagged released");
    t.ok(await findmnt(mountPoint), "still mounted");

    holder.kill("SIGTERM");
    await exited;
    const released = await releaseHost(bl, host);
    assertOutcome(t, released, "released", "after the process ended: released");
    t.equal(released.exitCode, 0);
    assertReleasedTags(t, await volumeEnd(bl, volumeId));
    t.notOk(await findmnt(mountPoint), "unmounted");
  },
);

/**
 * A process in a private copy of this mount namespace (`unshare --mount`, as a container or a
 * service starting makes one), holding a copy of the volume's mount until `end()`. Its own process
 * group, so that the forked sleep goes with it.
 */
async function namespaceHolder(t: Test, device: string): Promise<{ pid: number; end(): Promise<void> }> {
  const holder = spawn("unshare", ["--mount", "--propagation", "private", "--fork", "--", "sleep", "600"], {
    stdio: "ignore",
    detached: true,
  });
  const exited = new Promise<void>((resolve) => holder.once("exit", () => resolve()));
  const kill = (signal: NodeJS.Signals) => {
    try {
      if (holder.exitCode === null && holder.pid) process.kill(-holder.pid, signal);
    } catch {
      // Already gone.
    }
  };
  t.teardown(() => kill("SIGKILL"));
  const ownNs = await readlink("/proc/self/ns/mnt");
  // The copy exists once the sleep runs in it (a guard against a hang, not a timing assertion).
  await waitFor(async () => (await liveness(device)).holders.some((h) => h.ns !== ownNs), "the copy", 60_000);
  return {
    pid: holder.pid!,
    end: async () => {
      kill("SIGTERM");
      await exited;
    },
  };
}

t.test(
  "a copy of the mount held for a moment in another mount namespace (a container starting): the release waits " +
    "for it to go, then detaches; the log names the holder and how long it held",
  async (t) => {
    const { host, volumeId, mountPoint } = await bootedHost(t);
    await host.dockerd!.stop();
    const device = (await findmnt(mountPoint))?.source;
    t.ok(device, "mounted from its device");
    const holder = await namespaceHolder(t, device!);
    // The holder goes when the release says it waits for it: an event, not a time. The bound
    // (120 s) only keeps a broken wait from hanging the test.
    let held: string | undefined;
    let ended: Promise<void> | undefined;
    const released = await releaseHost(bl, host, {
      overrides: { ...overrides, timeouts: { mountHolderSeconds: 120 } },
      onLine: (line) => {
        if (held !== undefined || !line.includes("release.mount-held")) return;
        held = line;
        ended = holder.end();
      },
    });
    await ended;
    assertOutcome(t, released, "released", "released once the copy went");
    t.equal(released.exitCode, 0);
    t.match(held, /held by pid \d+ "unshare --mount[^"]*", pid \d+ "sleep 600" \(mnt:\[\d+\], at [^)]+\)/);
    t.match(held, /waiting up to 120 s for it to go before the detach/);
    const gone = released.log.find((line) => line.includes("release.mount-released"));
    t.match(
      gone,
      new RegExp(`heldBy="pid ${holder.pid} .*sleep 600.* for \\d+(\\.\\d)? s"`),
      "names it, with how long",
    );
    assertReleasedTags(t, await volumeEnd(bl, volumeId));
    t.notOk(await findmnt(mountPoint), "unmounted");
  },
);

t.test(
  "a mount namespace copied after the mount (unshare --mount) that stays past the bound: the release unmounts " +
    "but refuses to detach, naming the process and how long it waited; once it ends the release succeeds",
  async (t) => {
    const { host, volumeId, mountPoint } = await bootedHost(t);
    await host.dockerd!.stop();
    const device = (await findmnt(mountPoint))?.source;
    t.ok(device, "mounted from its device");
    const holder = await namespaceHolder(t, device!);

    const calls = bl.calls.length;
    const refused = await releaseHost(bl, host, { overrides: { ...overrides, timeouts: { mountHolderSeconds: 1 } } });
    assertOutcome(t, refused, "refused", "release refused");
    t.equal(refused.exitCode, 1, "exit code 1");
    const problem = refused.report?.problems[0];
    t.equal(problem?.step, "detach", "at the detach");
    t.match(problem?.message, /still mounted in another mount namespace, held by pid \d+ "unshare --mount/);
    t.match(problem?.message, /"sleep 600"/, "names the sleep");
    t.match(
      problem?.message,
      /still there at the end of the 1 s the detach waits for it \(timeouts\.mountHolderSeconds\)/,
      "after waiting the bound",
    );
    t.ok(
      refused.log.some((line) => line.includes("release.mount-held")),
      "the wait was logged as it began",
    );
    t.match(problem?.message, /stays attached and untagged: a mounted volume is never detached/);
    t.match(problem?.remediation, /nsenter -t \d+ -m umount /, "says how to end the hold");
    t.ok(
      refused.log.some((line) => line.startsWith("<3>release.refused:")),
      "logged as an error",
    );
    t.same(
      refused.report?.timeline.filter((s) => s.skipped).map((s) => s.step),
      ["wait-detached", "tag-released"],
      "wait and tags skipped",
    );
    t.same(mutatingCalls(bl, calls), [], "no DetachVolume, no tag change");
    const stuck = await volumeEnd(bl, volumeId);
    t.equal(stuck.state, "in-use", "the volume stays attached");
    t.same(stuck.attachments, [`attached ${host.instance.instanceId}`]);
    t.equal(stuck.tags[VolumeTag.claimedBy], host.instance.instanceId, "still claimed");
    t.notOk(stuck.tags[VolumeTag.releasedAt], "not tagged released");
    t.notOk(await findmnt(mountPoint), "unmounted in the agent's namespace");

    await holder.end();
    // The namespace goes with its last process; the kernel then drops the filesystem.
    await waitFor(
      async () => {
        const live = await liveness(device!);
        return live.holders.length === 0 && !live.superblock;
      },
      "the namespace to go",
      60_000,
    );
    const released = await releaseHost(bl, host);
    assertOutcome(t, released, "released", "after the process ended: released");
    t.equal(released.exitCode, 0);
    assertReleasedTags(t, await volumeEnd(bl, volumeId));
  },
);

t.test(
  "a mount namespace made outside this lab file (a container of another lab, a service of the machine) holds no " +
    "copy of its volume: the release detaches without a wait",
  async (t) => {
    const { host, volumeId, mountPoint } = await bootedHost(t);
    await host.dockerd!.stop();
    const device = (await findmnt(mountPoint))?.source;
    t.ok(device, "mounted from its device");
    // The namespace this file was started from (the tap runner's): where the other lab files
    // running beside it start, and the machine's services. A namespace made from it now copies
    // whatever is mounted there.
    const outside = `/proc/${process.ppid}/ns/mnt`;
    const holder = spawn(
      "nsenter",
      [`--mount=${outside}`, "--", "unshare", "--mount", "--propagation", "private", "--fork", "--"].concat([
        "sh",
        "-c",
        "echo ready; exec sleep 600",
      ]),
      { stdio: ["ignore", "pipe", "ignore"], detached: true },
    );
    t.teardown(() => {
      try {
        if (holder.exitCode === null && holder.pid) process.kill(-holder.pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    });
    // "ready" comes from inside the new namespace: its copy is made by then.
    await new Promise<void>((resolve, reject) => {
      holder.stdout!.once("data", () => resolve());
      holder.once("exit", (code) => reject(new Error(`the outside holder exited (${code}) before it was ready`)));
    });
    const ownNs = await readlink("/proc/self/ns/mnt");
    const elsewhere = (await liveness(device!)).holders.filter((h) => h.ns !== ownNs);
    t.same(elsewhere, [], "no namespace but this file's own mounts the volume");
    const released = await releaseHost(bl, host, { overrides: { ...overrides, timeouts: { mountHolderSeconds: 0 } } });
    assertOutcome(t, released, "released", "released with no wait at all (mountHolderSeconds 0)");
    t.notOk(
      released.log.some((line) => line.includes("release.mount-held")),
      "nothing held it",
    );
    assertReleasedTags(t, await volumeEnd(bl, volumeId));
  },
);

t.test(
  "docker still running on the volume: refused with release.stopDocker=false (nothing changed), stopped first " +
    "otherwise, node labels withdrawn first",
  async (t) => {
    const { host, volumeId, mountPoint } = await bootedHost(t);
    // A swarm manager: a re-run of the boot publishes node labels, which the release must withdraw
    // through the API before docker stops.
    const nodeId = await initSwarm(host.dockerd!);
    const rerun = await bl.boot(host, { overrides });
    assertOutcome(t, rerun, "ready", "re-run on the manager: ready");
    t.equal((await nodeLabels(host)).state, "ready", "node label state=ready");
    const before = await hostState(host);
    t.ok(before.dockerPid, "docker runs on the volume");
    const calls = bl.calls.length;
    const refused = await releaseHost(bl, host, { overrides: { ...overrides, release: { stopDocker: false } } });
    assertOutcome(t, refused, "refused", "refused");
    t.equal(refused.exitCode, 1, "exit code 1");
    t.equal(refused.plan.decision, "refused");
    t.match(
      refused.report?.reason,
      /docker still runs on the cache volume .* release\.stopDocker is false: nothing was changed/,
      "says why",
    );
    t.same(await hostState(host), before, "daemon.json, mount, device and docker unchanged");
    t.ok(await host.dockerd!.isActive(), "docker still running");
    t.same(mutatingCalls(bl, calls), [], "no EC2 change");
    t.equal((await volumeEnd(bl, volumeId)).state, "in-use");

    const released = await releaseHost(bl, host);
    assertOutcome(t, released, "released", "with the default (stopDocker true): released");
    t.same(
      released.plan.steps.slice(0, 3).map((s) => s.step),
      ["withdraw-labels", "reset-data-root", "stop-docker"],
      "labels off and daemon.json reset before docker stops",
    );
    t.ok(
      released.log.some((line) =>
        new RegExp(
          `^<6>labels\\.remove: node labels under ${LABEL_PREFIX.replace(/\./g, "\\.")}\\. removed ` +
            `node=${nodeId} removed=[1-9]`,
        ).test(line),
      ),
      "the node labels were removed through the manager's API",
      { log: released.log.join("\n") },
    );
    t.notOk(await host.dockerd!.isActive(), "docker stopped");
    t.notOk(await findmnt(mountPoint), "unmounted");
    assertReleasedTags(t, await volumeEnd(bl, volumeId));
  },
);

t.test(
  "a disabled instance (ebs-cache:enabled=false): boot attaches nothing and leaves docker alone; release does nothing",
  async (t) => {
    const host = await bl.addHost({ tags: { "ebs-cache:enabled": "false" } });
    const attaches = bl.emulatorAttachRequests();
    const booted = await bl.boot(host, { overrides });
    assertOutcome(t, booted, "disabled", "boot: disabled");
    t.equal(booted.exitCode, 0);
    t.equal(bl.emulatorAttachRequests(), attaches, "no AttachVolume");
    t.notOk(host.dockerd, "docker neither started nor restarted");
    const daemon = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
    t.equal(daemon["data-root"], host.paths.defaultDataRoot, "data-root untouched");
    t.equal(
      labelRecord((daemon.labels as string[] | undefined) ?? [])[`${LABEL_PREFIX}.state`],
      "disabled",
      "label state=disabled",
    );

    const before = await hostState(host);
    const calls = bl.calls.length;
    const released = await releaseHost(bl, host);
    assertOutcome(t, released, "disabled", "release: disabled");
    t.equal(released.exitCode, 0, "exit code 0");
    t.same(released.plan.steps, [], "no step");
    t.same(mutatingCalls(bl, calls), [], "no EC2 change");
    t.same(await hostState(host), before, "daemon.json (with its disabled label) byte for byte, no mount, no device");
    t.notOk(host.dockerd, "docker still untouched");
  },
);

t.test(
  "the release's times are EC2's: a host 2 days behind writes an expiry in EC2's future, a host years ahead no " +
    "expiry years away",
  async (t) => {
    // "The host's clock" moves by moving EC2's the other way: the agent's own clock stays real.
    t.teardown(() => bl.lab.ec2.setClockOffset(0));
    const day = 24 * 3_600_000;
    for (const [hostClock, ec2Offset] of [
      ["2 d behind", 2 * day],
      ["1825 d ahead of", -5 * 365 * day],
    ] as const) {
      bl.lab.ec2.setClockOffset(ec2Offset);
      const host = await bl.addHost();
      // Phase 1 only (`boot --no-docker`): a volume claimed and mounted, as the release finds it.
      const bootLog = createMemoryLogger("debug");
      const booted = await bootLabHost(bl.lab, host, { overrides, log: bootLog, withDocker: false });
      assertOutcome(t, { ...booted, log: bootLog.lines }, "prepared", `boot (host ${hostClock} EC2's): prepared`);
      const volumeId = booted.report!.volumeId!;
      const claimedAt = Date.parse((await volumeEnd(bl, volumeId)).tags[VolumeTag.claimedAt] ?? "");
      t.ok(Math.abs(claimedAt - bl.lab.ec2.now()) < 10 * 60_000, "claimed-at in EC2's time");

      const released = await releaseHost(bl, host);
      assertOutcome(t, released, "released", "released");
      const end = await volumeEnd(bl, volumeId);
      assertReleasedTags(t, end);
      const releasedAt = Date.parse(end.tags[VolumeTag.releasedAt] ?? "");
      const expiresAt = Date.parse(end.tags[VolumeTag.expiresAt] ?? "");
      const ec2Now = bl.lab.ec2.now();
      t.ok(Math.abs(releasedAt - ec2Now) < 10 * 60_000, "released-at is EC2's time", {
        releasedAt: end.tags[VolumeTag.releasedAt],
        ec2: new Date(ec2Now).toISOString(),
      });
      t.ok(
        expiresAt > ec2Now + 23 * 3_600_000 && expiresAt < ec2Now + 25 * 3_600_000,
        "expires a TTL (24 h) into EC2's future: neither already past nor years away",
      );
      t.ok(
        released.log.some((line) => line.includes(`ec2.clock-offset: this host's clock is ${hostClock} EC2's`)),
        "the release says the host's clock is off",
      );
    }
  },
);

t.test(
  "the lab closes and leaves no loop device, mount or dockerd behind; nothing was force-detached or left attached",
  async (t) => {
    await closeLabLeavingNothing(t, bl, { noForceDetachEvent: true, noneAttached: true });
  },
);
