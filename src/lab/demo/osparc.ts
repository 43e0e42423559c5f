/**
 * `npm run lab -- --osparc`: the agent under osparc's autoscaler, as a readable timeline. The
 * autoscaler actor (autoscaler.ts) launches, joins, labels, terminates, stops and starts lab
 * instances the way osparc does, each running the real agent (phase 1 / docker / phase 2):
 * a machine for a task's ids gets a workspace volume from the chunked labels tag; its service
 * writes a file into a docker volume and brings an image of its own, then closes, and osparc removes
 * the service's docker volumes as director-v2 does; launched again for the same ids, the machine
 * gets that volume back with the image (no pull again: the time the first machine spent on it) and
 * without the docker volume; other ids never get it; a warm buffer keeps its volume over a stop and
 * takes its task's tag written after the start, with no AttachVolume (the emulator's ledger).
 * Then the lab is torn down, as by the first demo (demo.ts).
 */
import { join } from "node:path";
import { DescribeVolumesCommand } from "@aws-sdk/client-ec2";
import type { Logger } from "../../log.ts";
import { VolumeTag } from "../../tags.ts";
import {
  createAutoscalerActor,
  Osparc,
  type AgentRun,
  type OsparcBoot,
  type OsparcNode,
} from "../machines/autoscaler.ts";
import { buildImage, type DockerClient } from "../docker/images.ts";
import { buildGoldenSnapshot, createPoolVolumes } from "../volumes/golden.ts";
import { startLab, type Lab } from "../lab.ts";

export interface OsparcDemoOptions {
  pool: string;
  /** Pool volumes: new ids' workspaces are made of them (one each), the warm buffer takes one. */
  poolSize: number;
  log: Logger;
  out: (line: string) => void;
  /**
   * How often the start limit polls LaunchTime to joined (ms; default osparc's 10 s). A test
   * polls faster: waiting for osparc's next poll shows nothing the timeline does not already say.
   */
  startPollMs?: number;
}

const IMAGE = "lab/app:1";
/** An image outside the pool's set, which the first user's service brings (the lab has no registry: imported). */
const USER_IMAGE = "user-service:42";
const USER_IMAGE_BYTES = 8 * 1024 * 1024;
/** The service's docker volume: director-v2 names them per run and removes them at the service's close. */
const SERVICE_VOLUME = "work";
const PRODUCT = "s4l-academic-research-platform-europe-west-cluster-with-a-long-product-name";

/** A dynamic service's placement labels, long enough that osparc writes the tag in chunks. */
function taskLabels(user: string, project: string, node: string): Record<string, string> {
  return {
    "product-name": PRODUCT,
    "user-id": user,
    "project-id": project,
    "node-id": node,
    "wallet-id": "wallet_1234567890_for_the_academic_research_group",
  };
}
const FIRST = taskLabels("user_42", "9b5e1c2e-6a3f-4a8e-8c1d-2f1e0d9c7b6a", "3c1f0a9e-2b7d-4e8f-9a6b-5d4c3b2a1f0e");
const OTHER = taskLabels("user_77", "0d0d0d0d-1111-4222-8333-444455556666", "7e7e7e7e-aaaa-4bbb-8ccc-dddddddddddd");
const BUFFERED = taskLabels("user_99", "5a5a5a5a-2222-4333-8444-555566667777", "1b1b1b1b-cccc-4ddd-8eee-ffffffffffff");

/** Runs the osparc demo; resolves after the lab is torn down. */
export async function runOsparcDemo(options: OsparcDemoOptions): Promise<void> {
  const { log, out } = options;
  const started = performance.now();
  const at = () => `+${((performance.now() - started) / 1000).toFixed(1).padStart(5)} s`;
  const say = (who: "lab" | "osparc" | "agent" | "ec2" | "docker", text: string) =>
    out(`${at()}  ${who.padEnd(6)} ${text}`);

  const lab = await startLab({ name: "demo-osparc", log });
  let actor: ReturnType<typeof createAutoscalerActor> | undefined;
  try {
    say("lab", `EC2 emulator ${lab.ec2.endpoint}, lab root ${lab.root}`);
    const golden = await buildGoldenSnapshot(lab, {
      pool: options.pool,
      imageSet: "osparc-demo-1",
      images: [{ tag: IMAGE, payloadBytes: 2 * 1024 * 1024 }],
      log,
    });
    const pool = await createPoolVolumes(lab, golden, {
      pool: options.pool,
      imageSet: "osparc-demo-1",
      count: options.poolSize,
    });
    say(
      "lab",
      `golden snapshot ${golden.snapshotId} (${golden.images.join(", ")}), pool ${options.pool}: ${pool.join(" ")}`,
    );

    const startPollMs = options.startPollMs ?? 10_000;
    // osparc's minute, counted by the stand-in and (as docs/osparc.md has the operator set it) by the agents.
    const osparc = createAutoscalerActor({
      lab,
      agentConfig: { pool: options.pool },
      maxStartTimeMs: 60_000,
      pollIntervalMs: startPollMs,
    });
    actor = osparc;
    const attachesSince = (node: OsparcNode, seq: number) =>
      lab.ec2.requests
        .records()
        .filter((r) => r.seq > seq && r.action === "AttachVolume" && r.instanceId === node.instanceId).length;
    const lastSeq = () => lab.ec2.requests.records().at(-1)?.seq ?? 0;
    const sayBoot = (boot: OsparcBoot) => {
      say("agent", `phase 1 (boot --no-docker): ${outcomeOf(boot.phase1)} in ${sec(boot.phase1.ms)}`);
      say(
        "agent",
        `docker.service started; phase 2 (boot --no-claim): ${outcomeOf(boot)}, ${sec(boot.ms)} from boot start`,
      );
      if (boot.joinedMs !== undefined)
        say(
          "osparc",
          `cloud-final (after multi-user.target): docker swarm join --availability=drain at ${sec(boot.joinedMs)}`,
        );
    };
    const terminateInBackground = (node: OsparcNode): Promise<void> => {
      say("osparc", `TerminateInstances ${node.instanceId}`);
      const done = osparc
        .terminate(node)
        .then(() => say("osparc", `${node.instanceId} terminated: release ${outcomeOf(node.lastRelease)}`));
      // Awaited at the end; a failure meanwhile must not crash the demo before the lab is torn down.
      done.catch(() => undefined);
      return done;
    };
    /** RunInstances with the task's labels, boot, join, attach (tag deleted), activate. */
    const machineFor = async (labels: Record<string, string>, who: string) => {
      const node = await osparc.launch(labels);
      const chunks = Object.keys(await osparc.instanceTags(node))
        .filter((key) => key.startsWith(Osparc.labelsTag))
        .sort();
      say(
        "osparc",
        `RunInstances ${node.instanceId} for ${who}: labels tag in ${chunks.length} chunks ` +
          `(${chunks.map((key) => key.slice(Osparc.labelsTag.length)).join(", ")})`,
      );
      // The autoscaler's cycle watches the boot: broken if not attached 60 s after LaunchTime, else
      // attached (labels copied, the tag deleted) at its first poll (osparc: every 10 s) after the join.
      const watched = osparc.superviseStart(node);
      const boot = await osparc.boot(node);
      sayBoot(boot);
      const verdict = await watched;
      say(
        "osparc",
        verdict.joined
          ? `in the swarm ${sec(verdict.launchToJoinedMs)} after LaunchTime ` +
              `(seen at the ${startPollMs / 1000} s poll; limit 60 s)`
          : `never joined: terminated as broken after ${sec(verdict.brokenAfterMs)}`,
      );
      const left = Object.keys(await osparc.instanceTags(node)).filter((key) => key.startsWith(Osparc.labelsTag));
      say(
        "osparc",
        `joined; labels copied to the node, labels tag ` +
          `${left.length === 0 ? "deleted from the instance" : `still there: ${left.join(", ")}`}`,
      );
      await osparc.activate(node);
      return { node, boot };
    };

    // 1. A machine for a task's ids: its service brings an image of its own and writes into a docker volume.
    const first = await machineFor(FIRST, "user_42 / a project / a node");
    const workspace = first.boot.report?.volumeId ?? "";
    const dockerd = first.node.host.dockerd!;
    const pullStarted = performance.now();
    await buildImage(dockerd, {
      tag: USER_IMAGE,
      workDir: join(lab.root, "user-images"),
      payloadBytes: USER_IMAGE_BYTES,
      log,
    });
    const pullMs = performance.now() - pullStarted;
    say(
      "docker",
      `the service's own image ${USER_IMAGE} (${USER_IMAGE_BYTES / 1024 / 1024} MiB, outside the pool's set) ` +
        `put on ${workspace} in ${sec(pullMs)} (the lab's stand-in for its pull)`,
    );
    await dockerd.docker(["volume", "create", SERVICE_VOLUME]);
    await dockerd.docker([
      "run",
      "--rm",
      "--network",
      "none",
      "-v",
      `${SERVICE_VOLUME}:/data`,
      IMAGE,
      "sh",
      "-c",
      "echo written-by-the-first-instance > /data/file",
    ]);
    say("docker", `docker volume "${SERVICE_VOLUME}" on ${workspace}: /data/file = written-by-the-first-instance`);
    say("docker", "node labels:");
    for (const [key, value] of Object.entries(await osparc.nodeLabels(first.node)).sort())
      out(`             ${key}=${value}`);
    const engineLabels = (await dockerd.info()).Labels.filter((label) => label.startsWith("io.simcore.ebs-cache."));
    if (engineLabels.length > 0) say("docker", `engine labels: ${engineLabels.join(" ")}`);

    // 2. The service closes (its state saved to S3 first), then the node is emptied and terminated.
    await osparc.closeService(first.node, [SERVICE_VOLUME]);
    const leftVolumes = await dockerVolumes(dockerd);
    say(
      "osparc",
      `service closed: director-v2 removed its docker volumes from the node ` +
        `(docker volumes left: ${leftVolumes.length === 0 ? "none" : leftVolumes.join(" ")})`,
    );
    // Terminate: the release hands the workspace back.
    await osparc.drain(first.node);
    await osparc.terminate(first.node);
    const released = await describe(lab, workspace);
    say("osparc", `TerminateInstances ${first.node.instanceId}: drained, terminated`);
    say(
      "agent",
      `release (${first.node.lastRelease?.plan.shutdown.kind ?? "?"}): ${outcomeOf(first.node.lastRelease)}; ` +
        `${workspace} ${released.state}, expires-at ${released.tags[VolumeTag.expiresAt] ?? "none"}`,
    );

    // 3. The same ids again: the workspace brings the images back, not the service's volumes.
    const again = await machineFor(FIRST, "the same ids again");
    const againDocker = again.node.host.dockerd!;
    say(
      "agent",
      `${again.boot.report?.volumeId === workspace ? "the same" : "ANOTHER"} workspace volume ` +
        `${again.boot.report?.volumeId} (${again.boot.phase1.plan.selection.source})`,
    );
    const againVolumes = await dockerVolumes(againDocker);
    say(
      "docker",
      `docker volume "${SERVICE_VOLUME}": ${againVolumes.includes(SERVICE_VOLUME) ? "STILL THERE" : "gone"} ` +
        `(osparc removed it at the close; the service's state comes from S3, as on any node)`,
    );
    const imageKept = await hasImage(againDocker, USER_IMAGE);
    say(
      "docker",
      `image ${USER_IMAGE}: ${imageKept ? "present, no pull" : "MISSING"}; the workspace saves ` +
        `its ${sec(pullMs)} here (a Sim4Life core image: about 4 min from the registry)`,
    );
    // Nothing below needs these two volumes back: their terminations run while the next boots do.
    const terminations = [terminateInBackground(again.node)];

    // 4. Other ids.
    const other = await machineFor(OTHER, "user_77 (other ids)");
    const volumes = await dockerVolumes(other.node.host.dockerd!);
    const otherHasImage = await hasImage(other.node.host.dockerd!, USER_IMAGE);
    say(
      "agent",
      `other ids: volume ${other.boot.report?.volumeId} (${other.boot.phase1.plan.selection.source}), ` +
        `${other.boot.report?.volumeId === workspace ? "THE FIRST IDS' WORKSPACE" : "not the workspace of user_42"}; ` +
        `docker volumes: ${volumes.length === 0 ? "none" : volumes.join(" ")}; ` +
        `image ${USER_IMAGE}: ${otherHasImage ? "PRESENT" : "absent"}`,
    );
    terminations.push(terminateInBackground(other.node));

    // 5. A warm buffer: stopped with its pool volume attached, activated with the tag after the start.
    const buffer = await osparc.launch({}, { warmBuffer: true });
    say("osparc", `RunInstances ${buffer.instanceId} as a warm buffer (${Osparc.warmBufferTag}=true, no labels tag)`);
    const bufferBoot = await osparc.boot(buffer);
    sayBoot(bufferBoot);
    const kept = bufferBoot.report?.volumeId ?? "";
    say("agent", `buffer on ${kept} (${bufferBoot.phase1.plan.selection.source})`);
    await osparc.stop(buffer);
    const stopped = await describe(lab, kept);
    say("osparc", `StopInstances ${buffer.instanceId}: stopped`);
    say(
      "agent",
      `release (${buffer.lastRelease?.plan.shutdown.kind ?? "?"}): ${outcomeOf(buffer.lastRelease)}; ${kept} ` +
        `${stopped.state}${stopped.attachedTo ? ` to ${stopped.attachedTo}` : ""}, expires-at ` +
        `${stopped.tags[VolumeTag.expiresAt] ?? "none"}`,
    );
    const since = lastSeq();
    say(
      "osparc",
      `activation for user_99: StartInstances, then one CreateTags: ${Osparc.warmBufferTag}=false with the labels tag`,
    );
    // Supervised from its StartInstances, which resets LaunchTime (its first launch is older than the limit).
    const bufferWatched = osparc.superviseStart(buffer);
    const activated = await osparc.activateWarmBuffer(buffer, BUFFERED, {
      overrides: { workspace: { waitForLabelsTagSeconds: 20 } },
    });
    const waited = activated.phase1.log.some((line) => /waiting up to/.test(line));
    say(
      "agent",
      `phase 1 ${waited ? "waited for" : "did not wait for"} the labels tag (it lands before the OS boots; the ` +
        `buffer's pool volume is attached and reused)`,
    );
    sayBoot(activated);
    say(
      "ec2",
      `AttachVolume requests for ${buffer.instanceId} since StartInstances: ${attachesSince(buffer, since)} ` +
        `(volume ${activated.report?.volumeId === kept ? "kept" : `changed to ${activated.report?.volumeId}`})`,
    );
    const bufferVerdict = await bufferWatched;
    say(
      "osparc",
      bufferVerdict.joined
        ? `in the swarm ${sec(bufferVerdict.launchToJoinedMs)} after the LaunchTime its StartInstances set; ` +
            "joined; labels tag deleted"
        : `never joined: terminated as broken after ${sec(bufferVerdict.brokenAfterMs)}`,
    );
    await osparc.terminate(buffer);
    say("osparc", `TerminateInstances ${buffer.instanceId}: ${kept} ${(await describe(lab, kept)).state}`);
    await Promise.all(terminations);
  } finally {
    await actor?.close();
    await lab.close();
    say("lab", "down");
  }
}

function outcomeOf(
  run: AgentRun<{ report?: { outcome: string; volumeId?: string; reason?: string } | undefined }> | undefined,
): string {
  const result = run?.report;
  if (!result) return "no result";
  return (
    `${result.outcome}${result.volumeId ? ` on ${result.volumeId}` : ""}` +
    `${result.reason ? ` (${result.reason})` : ""}`
  );
}

/** The node's docker volumes, by name. */
async function dockerVolumes(dockerd: DockerClient): Promise<string[]> {
  return (await dockerd.docker(["volume", "ls", "-q"])).stdout.split("\n").filter(Boolean);
}

/** Whether the node has the image (an inspect, never a pull). */
async function hasImage(dockerd: DockerClient, image: string): Promise<boolean> {
  const listed = await dockerd.docker(["image", "ls", "--format", "{{.Repository}}:{{.Tag}}"]);
  return listed.stdout.split("\n").includes(image);
}

function sec(ms: number): string {
  return `${(ms / 1000).toFixed(2)} s`;
}

async function describe(
  lab: Lab,
  volumeId: string,
): Promise<{ state: string; attachedTo?: string; tags: Record<string, string> }> {
  const found = await lab.ec2Client().send(new DescribeVolumesCommand({ VolumeIds: [volumeId] }));
  const volume = found.Volumes?.[0];
  const attachedTo = volume?.Attachments?.[0]?.InstanceId;
  return {
    state: volume?.State ?? "gone",
    ...(attachedTo ? { attachedTo } : {}),
    tags: Object.fromEntries((volume?.Tags ?? []).map((tag) => [tag.Key!, tag.Value ?? ""])),
  };
}
