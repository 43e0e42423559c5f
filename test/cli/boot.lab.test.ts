/**
 * `ebs-cache-agent boot` as a process, where nothing may change: the agent's own instance tags
 * carrying shell metacharacters, `..` or an over-long value are refused before the agent makes a
 * single EC2 call (exit 3); osparc's labels tag, broken, is a warning and the pool, never a
 * refusal; and `--dry-run` prints the plan and changes nothing.
 * The CLI runs with `docker.control: none` so that no mistake could reach this machine's own
 * docker.service; the pool's volumes are blank (a dry run never looks inside them).
 */
import t from "tap";
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { orderCandidates } from "../../src/agent/volume-rules.ts";
import type { BootPlan } from "../../src/agent/boot/plan.ts";
import { ExitCode } from "../../src/errors.ts";
import type { LabHost } from "../../src/lab/lab.ts";
import { goldenPoolTags, mountsUnder, POOL, startBootLab } from "../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-boot-cli", golden: false });
t.teardown(() => bl.close());
const poolVolumes = [
  await bl.createBlankVolume(goldenPoolTags(POOL, undefined)),
  await bl.createBlankVolume(goldenPoolTags(POOL, undefined)),
];
const overrides = { pool: POOL, docker: { control: "none" } };
const WORKSPACE_TAG = "io.simcore.autoscaling.ec2_instance.docker_node_labels";

/** EC2 requests the emulator answered so far (any action, any process). */
function ec2Requests(): number {
  return bl.labLog.filter((line) => /^<\d>lab\.ec2-emulator: [A-Z][A-Za-z]+( failed)? requestId=/.test(line)).length;
}

/** Everything on the host that a boot could change. */
async function hostState(host: LabHost) {
  return {
    daemonJson: await readFile(host.paths.daemonJson, "utf8"),
    backup: existsSync(`${host.paths.daemonJson}.ebs-cache-agent.bak`),
    mounts: await mountsUnder(host.paths.mountRoot),
    devices: bl.lab.backend.attachments().filter((a) => a.instanceId === host.instance.instanceId).length,
  };
}

const BAD_TAGS: Array<{ what: string; tags: Record<string, string>; problem: RegExp }> = [
  {
    what: "a shell metacharacter in ebs-cache:pool (x;reboot)",
    tags: { "ebs-cache:pool": "x;reboot" },
    problem: /ebs-cache:pool: pool name "x;reboot" contains the shell metacharacter ";"/,
  },
  {
    what: "'..' in ebs-cache:pool",
    tags: { "ebs-cache:pool": "../../etc" },
    problem: /ebs-cache:pool: pool name "\.\.\/\.\.\/etc" contains "\.\."/,
  },
  {
    what: "a 300-character ebs-cache:pool",
    tags: { "ebs-cache:pool": "p".repeat(300) },
    problem: /ebs-cache:pool: pool name "p+\.\.\." is 300 characters long; at most 63 are allowed/,
  },
];

t.test(
  "invalid instance tags are rejected with a clear error before anything changes: exit 3, no EC2 call, " +
    "daemon.json unchanged",
  async (t) => {
    const hosts = await Promise.all(BAD_TAGS.map(({ tags }) => bl.addHost({ tags })));
    const before = await Promise.all(hosts.map(hostState));
    const requests = ec2Requests();
    const attaches = bl.emulatorAttachRequests();

    const runs = await Promise.all(hosts.map((host) => bl.cli(host, ["--json"], overrides)));
    for (const [i, { what, problem }] of BAD_TAGS.entries()) {
      const run = runs[i]!;
      t.equal(run.exitCode, ExitCode.config, `${what}: exit code 3`, { stderr: run.stderr });
      t.match(run.stderr, problem, `${what}: the error names the tag and the problem`);
      t.match(run.stderr, /nothing was changed on this node/, `${what}: and says nothing changed`);
      t.equal(run.stdout, "", `${what}: no plan printed`);
      t.same(await hostState(hosts[i]!), before[i], `${what}: daemon.json, mounts and devices unchanged`);
    }
    t.equal(bl.emulatorAttachRequests(), attaches, "no AttachVolume");
    t.equal(ec2Requests(), requests, "no EC2 request at all: the tags were refused first");
    for (const volumeId of poolVolumes)
      t.equal((await bl.describe(volumeId)).State, "available", `${volumeId} still available`);
  },
);

t.test(
  "boot --dry-run prints the plan and changes nothing: no AttachVolume, daemon.json unchanged, no mount",
  async (t) => {
    const host = await bl.addHost();
    const before = await hostState(host);
    const attaches = bl.emulatorAttachRequests();
    const requests = ec2Requests();
    const order = orderCandidates(host.instance.instanceId, poolVolumes);

    const human = await bl.cli(host, ["--dry-run"], overrides);
    t.equal(human.exitCode, 0, "exit code 0", { stderr: human.stderr });
    t.match(human.stdout, `instance ${host.instance.instanceId} in us-east-1a`);
    t.match(
      human.stdout,
      `source: pool (2 candidates: ${order.join(" ")})`,
      "the pool's candidates, in this instance's order",
    );
    t.match(human.stdout, "plan (dry run, nothing changed):");
    const steps = [...human.stdout.matchAll(/^\s+\d+\. (\S+)/gm)].map((m) => m[1]);
    const claimToSwitch = [
      "claim-volume",
      "tag-claim",
      "wait-for-device",
      "check-filesystem",
      "mount",
      // The lab's boot runs without docker (phase 1): the pre-warm run from the mount is begun there.
      "begin-prewarm",
      "grow-filesystem",
      "prepare-data-root",
      "switch-data-root",
    ];
    t.same(
      steps.slice(0, claimToSwitch.length),
      claimToSwitch,
      "the steps are listed, from the claim to the data-root switch",
    );

    const json = await bl.cli(host, ["--dry-run", "--json"], overrides);
    t.equal(json.exitCode, 0);
    const printed = JSON.parse(json.stdout) as { instanceId: string; plan: BootPlan; result: unknown };
    t.equal(printed.instanceId, host.instance.instanceId);
    t.match(printed.plan.selection, { source: "pool", candidates: order }, "--json: the same selection");
    t.same(
      printed.plan.selection.source === "pool" ? printed.plan.selection.candidates : [],
      order,
      "--json: the same candidates, in order",
    );
    t.same(
      printed.plan.steps.map((s) => s.step),
      steps,
      "--json: the same steps",
    );
    t.equal(printed.result, null, "--json: no result (nothing was run)");

    t.ok(ec2Requests() > requests, "the dry run did observe EC2 (so the request count above is not blind)");
    t.equal(bl.emulatorAttachRequests(), attaches, "no AttachVolume");
    t.same(await hostState(host), before, "daemon.json unchanged, no mount, no device");
    for (const volumeId of poolVolumes) {
      t.equal((await bl.describe(volumeId)).State, "available", `${volumeId} still available`);
      t.same(
        Object.keys(await bl.tags(volumeId)).sort(),
        Object.keys(goldenPoolTags(POOL, undefined)).sort(),
        `${volumeId}: no tag added`,
      );
    }
  },
);

t.test(
  "osparc's labels tag, broken (bad JSON, a missing chunk, a bad id), is one warning and the pool: exit 0, never 3",
  async (t) => {
    const broken: Array<{ what: string; tags: Record<string, string>; warning: RegExp }> = [
      {
        what: "malformed JSON",
        tags: { [WORKSPACE_TAG]: "{bad" },
        warning: /instance tag "io\.simcore\.autoscaling\.ec2_instance\.docker_node_labels": not valid JSON/,
      },
      {
        what: "a missing chunk",
        tags: { [`${WORKSPACE_TAG}_0`]: '{"user-id": "1", ', [`${WORKSPACE_TAG}_2`]: '"x": "y"}' },
        warning: /chunk _1 missing/,
      },
      {
        what: "a hostile id",
        tags: { [WORKSPACE_TAG]: JSON.stringify({ "user-id": "$(reboot)" }) },
        warning: /user-id "\$\(reboot\)" contains the shell metacharacter/,
      },
    ];
    for (const { what, tags, warning } of broken) {
      const host = await bl.addHost({ tags });
      const before = await hostState(host);
      const run = await bl.cli(host, ["--dry-run", "--json"], overrides);
      t.equal(run.exitCode, 0, `${what}: exit 0`, { stderr: run.stderr });
      const warnings = run.stderr.split("\n").filter((line) => line.startsWith("<4>"));
      t.equal(warnings.filter((line) => warning.test(line)).length, 1, `${what}: one warning line naming the problem`, {
        stderr: run.stderr,
      });
      t.match(
        warnings.find((line) => warning.test(line)),
        /the pool is used/,
        `${what}: it says the pool is used`,
      );
      const printed = JSON.parse(run.stdout) as { plan: BootPlan };
      t.equal(printed.plan.selection.source, "pool", `${what}: the plan takes the pool`);
      t.same(await hostState(host), before, `${what}: dry run, nothing changed`);
    }
  },
);

t.test("the lab closes and leaves no loop device, mount or dockerd behind", async (t) => {
  const left = await bl.close();
  t.same(left, { rootExists: false, loopDevices: [], mounts: [], dockerds: [] });
});
