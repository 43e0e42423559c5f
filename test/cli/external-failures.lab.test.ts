/**
 * Every failure told as what it is: commands, run as processes (the production bundle), meet
 * classes of failure that are not the agent's own and must end with one typed error line
 * (`<3>agent.failed: …` with a remediation) and its documented exit code, and never with "report
 * this as a bug", which is for the agent's own bugs.
 * What is covered: a config file missing, unreadable or malformed, for every command that takes
 * one (boot, release, prewarm, refresh, status, gc, prune, pool, pool fill); for the fleet
 * commands (pool, gc, pool fill, with and without --dry-run), an EC2 endpoint that refuses the
 * connection or never answers, no credentials, and an AWS refusal on every call
 * (UnauthorizedOperation, InvalidVolume.NotFound, RequestLimitExceeded); for snapshot upload, the
 * same of EBS and a missing image; for the node commands (boot --dry-run, boot --no-docker,
 * release, refresh, prewarm), an IMDS that refuses or never answers (with a short IMDS wait) and
 * an EC2 that refuses, denies (UnauthorizedOperation) or throttles every call: exit 1, but phase
 * 1's boot, which degrades (exit 4, one error line); for snapshot build, an image in no tarball
 * with pulling off, and one whose registry refuses; a full disk (a filled tmpfs) under the node
 * commands' state folder (a warning naming it, their outcome's exit code) and under snapshot
 * upload's --manifest (exit 1), snapshot build's --image (exit 1) and the pre-warm's lock, nothing
 * half-written; IMDS answering an empty instance id or a
 * web page for it; doctor against IMDS refusing or silent and EC2 refusing, denying or throttling
 * (its failing line with the failure's own remediation, exit 1), the agent's units missing. Not
 * yet: doctor against an EC2 that never answers (its calls wait one after another, a minute and
 * more), doctor on a bad config (it goes on with the defaults: the machine's own paths), docker
 * unreachable for the build.
 * The cases share one EC2 emulator and run a few at a time; an AWS refusal is an `errorCode` (or
 * throttle) fault of one action, so the cases that need different faults run one after another.
 */
import { execFile } from "node:child_process";
import { createServer as createHttpServer } from "node:http";
import { createServer, type Server, type Socket } from "node:net";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t, { type Test } from "tap";
import { LAB_CREDENTIALS, startLab } from "../../src/lab/lab.ts";
import type { Faults } from "../../src/lab/ec2/faults.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { ExitCode } from "../../src/errors.ts";
import { DoctorExit } from "../../src/cli/doctor.ts";
import { acquirePrewarmLock, writePrewarmState } from "../../src/agent/prewarm/state.ts";
import { FolderNotWritableError } from "../../src/fs-atomic.ts";
import { BuildNotBegunError, claimImageFile } from "../../src/host/image-file.ts";
import { MOUNT_RUN_FILE, mountRunKey, recordMountRun } from "../../src/agent/prewarm/mount-run.ts";
import { REFRESH_STATE_FILE, writeRefreshState, type RefreshState } from "../../src/agent/refresh/state.ts";
import { PREPARED_FILE, writePreparedRecord, type PreparedRecord } from "../../src/agent/boot/prepared-record.ts";
import { RECORD_FILE, writeWorkspaceRecord, type WorkspaceRecord } from "../../src/agent/workspace-record.ts";
import { RELEASE_RECORD_FILE, writeReleaseRecord, type ReleaseRecord } from "../../src/status/records.ts";
import { agentBundle, REPO, withCompileCache } from "../fixtures/lab/agent-bundle.ts";
import { assertLabPrerequisites, childEnv } from "../fixtures/lab/lab-prereq.ts";
import { DEFAULT_RECORD, makePoolImage } from "../fixtures/builders/pool-image.ts";
import { CONFIG_COMMANDS } from "../fixtures/builders/commands.ts";
import { labConfigJson } from "../../src/lab/machines/agent.ts";

await assertLabPrerequisites();
const CLI = await agentBundle();

const lab = await startLab({ name: "test-external-failures", log: createMemoryLogger() });
t.teardown(() => lab.close());
const work = await mkdtemp(join(tmpdir(), "ebs-cache-failures-"));
t.teardown(() => rm(work, { recursive: true, force: true }));

/** A port that accepts connections and never answers: an endpoint that times out. */
const held = new Set<Socket>();
const silent: Server = createServer((socket) => {
  held.add(socket);
  socket.on("close", () => held.delete(socket));
});
await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
t.teardown(() => {
  for (const socket of held) socket.destroy();
  silent.close();
});
const SILENT = `http://127.0.0.1:${(silent.address() as { port: number }).port}`;
/** A port nothing listens on (the silent server's, closed at once, is taken: port 9 is discard, never served here). */
const REFUSED = "http://127.0.0.1:9";

const EMPTY_HOME = join(work, "home");
await mkdir(EMPTY_HOME);
const image = join(work, "pool.img");
await makePoolImage(image);

/** The agent's config for the fleet commands: the pool, a zone, the EC2 endpoint given. */
async function fleetConfig(name: string, ec2Endpoint: string): Promise<string> {
  const path = join(work, `${name}.json`);
  await writeFile(
    path,
    JSON.stringify({
      pool: "failures",
      region: lab.region,
      keeper: { zones: [`${lab.region}a`], minAvailable: 1 },
      ec2Endpoint,
      metrics: { textfileDir: null },
      paths: { stateDir: join(work, `state-${name}`) },
    }),
  );
  return path;
}

interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

/** The bundle with only PATH, HOME and `env` of the environment (no AWS_* of the test's). */
async function agent(args: string[], env: Record<string, string> = {}): Promise<Ran> {
  const base = await withCompileCache(childEnv());
  const own = Object.fromEntries(
    Object.entries(base).filter(([key]) => !key.startsWith("AWS_") && key !== "EBS_CACHE_AGENT_CONFIG"),
  );
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { cwd: REPO, env: { ...own, HOME: EMPTY_HOME, ...env }, timeout: 120_000 },
      (error, stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === "number" ? error.code : -1) : 0, stdout, stderr }),
    );
  });
}

const CREDENTIALS = {
  AWS_ACCESS_KEY_ID: LAB_CREDENTIALS.accessKeyId,
  AWS_SECRET_ACCESS_KEY: LAB_CREDENTIALS.secretAccessKey,
};

/** One failure told as what it is: one `<3>agent.failed` line with its remediation, the code, no bug. */
function assertTold(t: Test, out: Ran, code: number, says: RegExp): void {
  t.equal(out.code, code, `exit code ${code}\n${out.stderr}`);
  t.notMatch(out.stderr, /report this as a bug|unexpected failure/, "not told as the agent's bug");
  const failed = out.stderr.split("\n").filter((line) => line.startsWith("<3>agent.failed: "));
  t.equal(failed.length, 1, "one failure line");
  t.match(failed[0] ?? "", says, "the failure says what it is");
  t.match(failed[0] ?? "", /remediation=/, "and what to do");
  t.notMatch(out.stderr, /^\s+at /m, "no stack trace");
}

// ---- config files: every command that reads one, as the node and the fleet run them ----

const malformed = join(work, "malformed.json");
await writeFile(malformed, '{ "pool": ');
const folder = join(work, "folder.json");
await mkdir(folder);
const CONFIG_FAILURES: Array<[string, string, RegExp]> = [
  ["missing", join(work, "absent.json"), /no such file/],
  ["unreadable (a folder)", folder, /cannot be read/],
  ["malformed", malformed, /not valid JSON/],
];

t.test("a config file missing, unreadable or malformed: exit 3, nothing done", async (t) => {
  const cases = CONFIG_COMMANDS.flatMap((command) =>
    CONFIG_FAILURES.map(([what, path, says]) => ({ command, what, path, says })),
  );
  await inBatches(cases, 6, async ({ command, what, path, says }) => {
    const out = await agent([...command, "--config", path]);
    t.test(`${command.join(" ")}: config ${what}`, async (t) => assertTold(t, out, ExitCode.config, says));
  });
});

// ---- EC2: the fleet commands, whose credentials are the SDK's chain ----

const FLEET_COMMANDS = [["pool"], ["gc", "--dry-run"], ["gc"], ["pool", "fill", "--dry-run"], ["pool", "fill"]];
const labConfig = await fleetConfig("lab", lab.ec2.endpoint);
const refusedConfig = await fleetConfig("refused", REFUSED);
const silentConfig = await fleetConfig("silent", SILENT);

/**
 * The cases whose time is a wait on the network (a refused connection's retries, a silent endpoint's
 * request timeout) and which reach neither the lab's EC2 nor its faults: started here, all at once,
 * and asserted in their place below, so that their half minute each passes beside the other cases.
 */
const refusedRuns = FLEET_COMMANDS.map((command) => agent([...command, "--config", refusedConfig], CREDENTIALS));
// One attempt: the SDK's 30 s per request is the wait under test, not its retries.
const silentRuns = FLEET_COMMANDS.map((command) =>
  agent([...command, "--config", silentConfig], { ...CREDENTIALS, AWS_MAX_ATTEMPTS: "1" }),
);

// snapshot upload against EBS refusing or silent, likewise (asserted under "snapshot upload" below).
const uploadNetworkRuns: Array<[string, Promise<Ran>, RegExp]> = [
  ["EBS refuses the connection", agent(uploadArgs("refused", REFUSED), CREDENTIALS), /refused|ECONNREFUSED/],
  ["EBS never answers", agent(uploadArgs("silent", SILENT), { ...CREDENTIALS, AWS_MAX_ATTEMPTS: "1" }), /answer|time/],
];

t.test("EC2 refuses the connection: exit 1, the endpoint named", async (t) => {
  for (const [at, command] of FLEET_COMMANDS.entries()) {
    const out = await refusedRuns[at]!;
    t.test(command.join(" "), async (t) => assertTold(t, out, ExitCode.failure, /127\.0\.0\.1:9|ECONNREFUSED|refused/));
  }
});

t.test("EC2 never answers: exit 1 once the request's timeout is over", async (t) => {
  for (const [at, command] of FLEET_COMMANDS.entries()) {
    const out = await silentRuns[at]!;
    t.test(command.join(" "), async (t) => assertTold(t, out, ExitCode.failure, /answer|time/));
  }
});

t.test("no credentials anywhere: exit 1, said in one line", async (t) => {
  await inBatches(FLEET_COMMANDS, 5, async (command) => {
    const out = await agent([...command, "--config", labConfig], { AWS_EC2_METADATA_SERVICE_ENDPOINT: REFUSED });
    t.test(command.join(" "), async (t) => assertTold(t, out, ExitCode.failure, /credentials/));
  });
});

const AWS_REFUSALS: Array<[string, Faults, RegExp]> = [
  [
    "UnauthorizedOperation",
    { actions: { DescribeVolumes: { errorCode: "UnauthorizedOperation" } } },
    /UnauthorizedOperation|not authori[sz]ed/,
  ],
  [
    "InvalidVolume.NotFound",
    { actions: { DescribeVolumes: { errorCode: "InvalidVolume.NotFound" } } },
    /InvalidVolume\.NotFound|not found/,
  ],
  ["RequestLimitExceeded on every call", { throttleRate: 1 }, /RequestLimitExceeded|throttl/],
];

for (const [what, faults, says] of AWS_REFUSALS) {
  t.test(`EC2 answers ${what}: exit 1, the code named`, async (t) => {
    lab.ec2.setFaults(faults);
    t.teardown(() => lab.ec2.setFaults({}));
    await inBatches(FLEET_COMMANDS, 5, async (command) => {
      const out = await agent([...command, "--config", labConfig], { ...CREDENTIALS, AWS_MAX_ATTEMPTS: "2" });
      t.test(command.join(" "), async (t) => assertTold(t, out, ExitCode.failure, says));
    });
  });
}

// ---- IMDS and EC2: the node commands, whose credentials are the instance profile's ----

/** A lab host (its folders, its IMDS): the node commands' config with IMDS and EC2 as given. */
const node = await lab.addHost();
async function nodeConfig(name: string, over: { imds?: string; ec2?: string }): Promise<string> {
  const path = join(work, `node-${name}.json`);
  // Where IMDS is the failure, a short wait (its default is a minute): the give-up is what is under
  // test, not its length. Where IMDS is the lab's own, the default wait: six commands start at once
  // beside other lab files, and an answer later than a second is the loaded machine, not a failure
  // (one CI run saw `refresh` give up on the lab's IMDS after 2 s in an EC2 case).
  const json = labConfigJson(lab, node, {
    ...(over.imds ? { timeouts: { imdsSeconds: 2, imdsRequestSeconds: 1 } } : {}),
    ...(over.imds ? { imdsEndpoint: over.imds } : {}),
    ...(over.ec2 ? { ec2Endpoint: over.ec2 } : {}),
  });
  await writeFile(path, JSON.stringify(json));
  return path;
}

/**
 * The node commands that ask IMDS and EC2 on a host with no cache volume yet. `status` and `prune`
 * read the host's own records first and ask neither here (nothing booted, nothing mounted).
 * Phase 1's boot degrades rather than fail when EC2 fails (its own exit code, 4); a dry run fails.
 */
const NODE_COMMANDS = [["release"], ["refresh"], ["prewarm"], ["boot", "--dry-run"], ["boot", "--no-docker"]];

t.test("IMDS refuses or never answers: exit 1, IMDS named, with what to check", async (t) => {
  const refused = await nodeConfig("imds-refused", { imds: REFUSED });
  const silentImds = await nodeConfig("imds-silent", { imds: SILENT });
  const cases = NODE_COMMANDS.flatMap((command) => [
    { command, what: "refused", config: refused },
    { command, what: "silent", config: silentImds },
  ]);
  const doctorCases = [
    { command: ["doctor"], what: "refused", config: refused },
    { command: ["doctor"], what: "silent", config: silentImds },
  ];
  await inBatches([...cases, ...doctorCases], 6, async ({ command, what, config }) => {
    const out = await agent([...command, "--config", config]);
    t.test(`${command.join(" ")}: IMDS ${what}`, async (t) =>
      command[0] === "doctor"
        ? assertDoctorFailed(t, out, "imds", /instance metadata service .* did not answer/, /metadata service enabled/)
        : assertTold(t, out, ExitCode.failure, /instance metadata service .* did not answer/),
    );
  });
});

/**
 * doctor tells a failure as one of its lines (the check, `FAIL`, what failed, `->` what to do) and
 * exits 1; never as the agent's bug, never "could not run". The lab's config points its units folder
 * and systemd's runtime folder into the host folder: the agent's units are missing there (a `FAIL`
 * of each, with how to install them), and no unit of the machine's docker is read.
 */
function assertDoctorFailed(t: Test, out: Ran, check: string, says: RegExp, remedy: RegExp): void {
  t.equal(out.code, DoctorExit.failed, `exit code ${DoctorExit.failed}\n${out.stderr}`);
  t.notMatch(out.stdout + out.stderr, /report this as a bug|unexpected failure|could not run/, "not told as a bug");
  t.notMatch(out.stdout + out.stderr, /^\s+at /m, "no stack trace");
  const line = out.stdout.split("\n").find((l) => l.startsWith(`FAIL ${check} `));
  t.ok(line, `a FAIL line for ${check}\n${out.stdout}`);
  const [detail, remediation] = (line ?? "").split("  -> ");
  t.match(detail ?? "", says, "it says what failed");
  t.match(remediation ?? "", remedy, "and what to do");
  t.match(out.stdout, /^WARN daemon-json .*systemd does not run this host/m, "the machine's docker unit not read");
  for (const unit of out.stdout.split("\n").filter((l) => / unit\.ebs-cache-agent/.test(l)))
    t.match(unit, /^FAIL .* not installed {2}-> install the agent's units/, "a missing unit file, named");
}

/** An IMDS that answers, but with `instanceId` for the instance id (a token and a zone as EC2's). */
async function oddImds(t: Test, instanceId: string): Promise<string> {
  const server = createHttpServer((request, response) => {
    // The SDK asks `//latest/meta-data/…` (its base URL's slash and the path's): one slash here.
    const path = (request.url ?? "").replace(/\/+/g, "/");
    if (request.method === "PUT" && path === "/latest/api/token") return void response.end("lab-token");
    if (path === "/latest/meta-data/instance-id") return void response.end(instanceId);
    if (path === "/latest/meta-data/placement/availability-zone") return void response.end(`${lab.region}a`);
    if (path === "/latest/meta-data/placement/region") return void response.end(lab.region);
    response.statusCode = 404;
    response.end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.teardown(() => server.close());
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

t.test("IMDS answering odd data: exit 1, IMDS named with what it answered", async (t) => {
  const answers: Array<[string, string, RegExp]> = [
    [
      "an empty instance id",
      "",
      /instance metadata service at \S+ answered \/latest\/meta-data with unexpected data .*: instance ""/,
    ],
    [
      "a web page for the instance id",
      "<html>login</html>",
      /instance metadata service at \S+ answered \/latest\/meta-data with unexpected data .*: instance "<html>login/,
    ],
  ];
  for (const [what, instanceId, says] of answers) {
    const config = await nodeConfig(`imds-odd-${answers.findIndex(([w]) => w === what)}`, {
      imds: await oddImds(t, instanceId),
    });
    await inBatches([["release"], ["boot", "--dry-run"]], 2, async (command) => {
      const out = await agent([...command, "--config", config]);
      t.test(`${command.join(" ")}: ${what}`, async (t) => assertTold(t, out, ExitCode.failure, says));
    });
  }
});

/**
 * Phase 1 degrades when EC2 fails (docker on its default data-root): exit 4 when the failure may
 * clear, 1 when an operator must fix it (a denial); the failure one error line, no bug, no stack.
 */
function assertDegraded(t: Test, out: Ran, code: number, says: RegExp): void {
  t.equal(out.code, code, `exit code ${code}\n${out.stderr}`);
  t.notMatch(out.stderr, /report this as a bug|unexpected failure/, "not told as the agent's bug");
  const errors = out.stderr.split("\n").filter((line) => line.startsWith("<3>"));
  t.equal(errors.length, 1, "one error line");
  t.match(errors[0] ?? "", says, "it says what failed");
  t.match(errors[0] ?? "", /remediation=/, "and what to do");
  t.match(out.stderr, /<4>boot\.degraded: /, "the node said degraded");
  t.notMatch(out.stderr, /^\s+at /m, "no stack trace");
}

/** `doctor` is the remediation its `volumes` line gives: the failure's own, not always a permission. */
const NODE_EC2_FAILURES: Array<[string, { config?: string; faults?: Faults; phase1: number; doctor: RegExp }, RegExp]> =
  [
    [
      "refuses the connection",
      { config: "ec2-refused", phase1: ExitCode.degraded, doctor: /route to the EC2 endpoint/ },
      /ECONNREFUSED|refused/,
    ],
    [
      "answers UnauthorizedOperation",
      {
        faults: {
          actions: {
            DescribeInstances: { errorCode: "UnauthorizedOperation" },
            DescribeVolumes: { errorCode: "UnauthorizedOperation" },
          },
        },
        phase1: ExitCode.failure,
        doctor: /allow ec2:DescribeVolumes/,
      },
      /UnauthorizedOperation|not authori[sz]ed/,
    ],
    [
      "throttles every call",
      { faults: { throttleRate: 1 }, phase1: ExitCode.degraded, doctor: /throttling .* re-run/ },
      /RequestLimitExceeded|throttl/,
    ],
  ];

for (const [what, { config, faults, phase1, doctor }, says] of NODE_EC2_FAILURES) {
  t.test(`EC2 ${what}: the node commands exit 1, phase 1 degrades`, async (t) => {
    const path = await nodeConfig(config ?? "ec2-lab", config ? { ec2: REFUSED } : {});
    if (faults) {
      lab.ec2.setFaults(faults);
      t.teardown(() => lab.ec2.setFaults({}));
    }
    await inBatches([...NODE_COMMANDS, ["doctor"]], 6, async (command) => {
      const out = await agent([...command, "--config", path], { AWS_MAX_ATTEMPTS: "1" });
      t.test(command.join(" "), async (t) =>
        command.includes("--no-docker")
          ? assertDegraded(t, out, phase1, says)
          : command[0] === "doctor"
            ? assertDoctorFailed(t, out, "volumes", says, doctor)
            : assertTold(t, out, ExitCode.failure, says),
      );
    });
  });
}

// ---- EBS direct: snapshot upload ----

function uploadArgs(name: string, endpoint: string, ec2Endpoint = lab.ec2.endpoint): string[] {
  return [
    "snapshot",
    "upload",
    "--image",
    image,
    "--manifest",
    join(work, `${name}.manifest.json`),
    "--pool",
    "failures",
    "--image-set",
    "set-1",
    "--images",
    DEFAULT_RECORD.images.join(","),
    "--image-store",
    DEFAULT_RECORD.imageStore,
    "--engine-version",
    DEFAULT_RECORD.engineVersion,
    "--region",
    lab.region,
    "--endpoint",
    endpoint,
    "--ec2-endpoint",
    ec2Endpoint,
  ];
}

t.test("snapshot upload: each failure not its own told as what it is", async (t) => {
  for (const [what, run, says] of uploadNetworkRuns) {
    const out = await run;
    t.test(what, async (t) => assertTold(t, out, ExitCode.failure, says));
  }
  const cases: Array<[string, string[], Record<string, string>, RegExp]> = [
    [
      "no credentials",
      uploadArgs("anonymous", lab.ec2.endpoint),
      { AWS_EC2_METADATA_SERVICE_ENDPOINT: REFUSED },
      /credentials/,
    ],
    [
      "the image missing",
      ["snapshot", "upload", ...uploadArgs("absent", lab.ec2.endpoint).slice(2)].map((a) =>
        a === image ? join(work, "absent.img") : a,
      ),
      CREDENTIALS,
      /absent\.img/,
    ],
  ];
  await inBatches(cases, 2, async ([what, args, env, says]) => {
    const out = await agent(args, env);
    t.test(what, async (t) =>
      assertTold(t, out, what === "the image missing" ? ExitCode.usage : ExitCode.failure, says),
    );
  });
  lab.ec2.setFaults({ actions: { StartSnapshot: { errorCode: "AccessDeniedException" } } });
  t.teardown(() => lab.ec2.setFaults({}));
  const denied = await agent(uploadArgs("denied", lab.ec2.endpoint), CREDENTIALS);
  t.test("EBS answers AccessDeniedException", async (t) =>
    assertTold(t, denied, ExitCode.failure, /AccessDenied|denied/),
  );
});

// ---- snapshot build: the images it cannot have ----

t.test("snapshot build: an image it cannot have is told as what it is, and undone", async (t) => {
  const build = (name: string, images: string, extra: string[]) => [
    "snapshot",
    "build",
    "--image",
    join(work, `${name}.img`),
    "--size-gib",
    "1",
    "--images",
    images,
    "--no-record-reads",
    ...extra,
  ];
  const cases: Array<[string, string[], RegExp]> = [
    ["in no tarball, pulling off", build("offline", "lab/absent:1", ["--no-pull"]), /lab\/absent:1 is in none/],
    // dockerd takes a registry on 127.0.0.1 as plain http: refused at once, by the API pull and then the CLI's.
    ["its registry refusing", build("unreachable", "127.0.0.1:9/lab/absent:1", []), /127\.0\.0\.1:9.*refused/],
  ];
  await inBatches(cases, 2, async ([what, args, says]) => {
    const out = await agent(args);
    t.test(what, async (t) => {
      assertTold(t, out, ExitCode.failure, says);
      t.notMatch(out.stderr, /snapshot\.build-undo-failed/, "what it set up was undone");
    });
  });
});

// ---- a full disk where a command writes ----

/**
 * A small tmpfs, mounted for the test and filled to the last byte after `seed` has put the files
 * a command finds there: a write to it fails with ENOSPC at once, wherever in the write it lands.
 * A tmpfs full of bytes still makes folders (they take an inode, no block): `inodes` caps its inodes
 * too, so that the filler takes the last one and a mkdir there fails with ENOSPC as well.
 */
async function fullFilesystem(
  t: Test,
  name: string,
  seed: (folder: string) => Promise<void>,
  /** A size given: a tmpfs that small, left empty (room, but less than a write needs). */
  small?: string,
  inodes?: number,
): Promise<string> {
  const folder = join(work, name);
  await mkdir(folder);
  const options = `size=${small ?? "512k"},mode=0755${inodes ? `,nr_inodes=${inodes}` : ""}`;
  await run("mount", ["-t", "tmpfs", "-o", options, `full-${name}`, folder]);
  t.teardown(() => run("umount", [folder]));
  await seed(folder);
  // dd ends with "No space left on device" once it is full: that end is the point.
  if (!small) await run("dd", ["if=/dev/zero", `of=${join(folder, ".filler")}`, "bs=4k"]).catch(() => undefined);
  return folder;
}

/** The files under `folder` (recursively) with their content, for "nothing changed". */
async function contents(folder: string): Promise<Record<string, string>> {
  const found: Record<string, string> = {};
  for (const entry of await readdir(folder, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || entry.name === ".filler") continue;
    const path = join(entry.parentPath, entry.name);
    found[path] = await readFile(path, "utf8");
  }
  return found;
}

function run(command: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) =>
    execFile(command, args, (error, _out, stderr) => (error ? reject(new Error(`${command}: ${stderr}`)) : resolve())),
  );
}

/**
 * A node command whose state folder is full: its outcome's own exit code (a state file is the
 * status's, not the outcome: docs/operations.md), one warning naming the full folder and what to
 * do, no bug, no stack, and nothing half-written (no temp file left, what was there intact).
 */
async function assertFullWarned(t: Test, out: Ran, code: number, folder: string, before: Record<string, string>) {
  t.equal(out.code, code, `exit code ${code}\n${out.stderr}`);
  t.notMatch(out.stderr, /report this as a bug|unexpected failure/, "not told as the agent's bug");
  const full = out.stderr.split("\n").filter((line) => line.includes(`no space left on ${folder} (ENOSPC)`));
  t.equal(full.length, 1, "said once");
  t.match(full[0] ?? "", /^<4>/, "as a warning");
  t.match(full[0] ?? "", /remediation=".*free space|free space there/, "with what to do");
  t.notMatch(out.stderr, /^\s+at /m, "no stack trace");
  t.same(await contents(folder), before, "no temp file left, what was there intact");
}

t.test("a full disk where a command writes: the folder named, ENOSPC said, nothing half-written", async (t) => {
  const stateDir = await fullFilesystem(t, "full-state", async (folder) => {
    await writeFile(join(folder, "last-release.json"), "{}\n");
    await writeFile(join(folder, "refresh.json"), "{}\n");
  });
  const before = await contents(stateDir);
  const config = join(work, "node-full-state.json");
  const json = JSON.parse(await readFile(await nodeConfig("full-state-base", {}), "utf8")) as {
    paths: Record<string, unknown>;
  };
  await writeFile(config, JSON.stringify({ ...json, paths: { ...json.paths, stateDir } }));
  // The state each writes on a host with no cache volume: release and refresh their records, phase
  // 1's boot the workspace record (kept on the volume instead), degraded as it would be anyway.
  const writers: Array<[string[], number]> = [
    [["release"], ExitCode.ok],
    [["refresh"], ExitCode.ok],
    [["boot", "--no-docker"], ExitCode.degraded],
  ];
  for (const [command, code] of writers) {
    const out = await agent([...command, "--config", config]);
    t.test(command.join(" "), async (t) => assertFullWarned(t, out, code, stateDir, before));
  }
  const dryRun = await agent(["boot", "--dry-run", "--config", config]);
  t.test("boot --dry-run writes nothing: unaffected", async (t) => {
    t.equal(dryRun.code, ExitCode.ok, dryRun.stderr);
    t.notMatch(dryRun.stderr, /no space left/);
  });

  // snapshot build with its --image on a full disk: at its marker (filled), or at mkfs (3 MiB for 1 GiB).
  const buildFolders = [
    ["filled", await fullFilesystem(t, "full-build", async () => undefined)],
    ["too small for the file system", await fullFilesystem(t, "small-build", async () => undefined, "3m")],
  ] as const;
  await inBatches([...buildFolders], 2, async ([what, folder]) => {
    const args = ["snapshot", "build", "--image", join(folder, "pool.img"), "--size-gib", "1"];
    const out = await agent([...args, "--images", "lab/a:1", "--no-pull", "--no-record-reads"]);
    t.test(`snapshot build, its folder ${what}: exit 1, nothing left`, async (t) => {
      assertTold(t, out, ExitCode.failure, /^<3>agent\.failed: no space left during (clean-leftovers|format): /);
      t.match(out.stderr, new RegExp(`remediation="free space on the filesystem of ${folder} \\(df -h`));
      if (what === "filled") {
        // Full before the build began: the line names the image asked for, not the build's own marker file.
        t.match(out.stderr, `the build of ${join(folder, "pool.img")} could not begin`);
        t.notMatch(out.stderr, /building not written/);
      }
      t.notMatch(out.stderr, /snapshot\.build-undo-failed/, "what it set up was undone");
      t.same(await readdir(folder), what === "filled" ? [".filler"] : [], "nothing left");
    });
  });

  // The pre-warm's lock in a full state folder (in-process: a CLI prewarm that takes it needs a booted
  // volume, which this file does not make): told with what to free, no empty lock left behind.
  const prewarmState = await fullFilesystem(t, "full-prewarm", async () => undefined);
  const locked = await acquirePrewarmLock(prewarmState).catch((error: unknown) => error);
  t.test("prewarm's lock: the folder named, nothing half-written", async (t) => {
    t.type(locked, FolderNotWritableError);
    t.match((locked as Error).message, `no space left on ${prewarmState} (ENOSPC): prewarm.lock not written`);
    t.match((locked as FolderNotWritableError).remediation, /free space on the filesystem of/);
    t.same(await readdir(prewarmState), [".filler"], "no empty lock file left");
  });
  // The same when the state folder is not there yet and the full disk refuses to make it: the root
  // and the filler take the tmpfs's two inodes.
  const noFolder = await fullFilesystem(t, "full-prewarm-folder", async () => undefined, undefined, 2);
  const prewarmDir = join(noFolder, "state");
  const unmade = await acquirePrewarmLock(prewarmDir).catch((error: unknown) => error);
  const unwritten = await writePrewarmState(prewarmDir, {
    version: 1,
    volumeId: "vol-0123456789abcdef0",
    device: "/dev/nvme1n1",
    mountPoint: "/var/lib/ebs-cache",
    strategy: "check",
    action: "check",
    reason: "test",
    phase: "checking",
    verdict: "unknown",
    labels: {},
    startedAt: "2026-01-01T00:00:00.000Z",
    updatedAt: "2026-01-01T00:00:00.000Z",
  }).catch((error: unknown) => error);
  const unrecorded = await recordMountRun(prewarmDir, mountRunKey("vol-0123456789abcdef0", undefined)).catch(
    (error: unknown) => error,
  );
  // snapshot build's work folder, which its claim of the image makes first (in-process, as above).
  const unbegun = await claimImageFile(join(noFolder, "work"), join(noFolder, "pool.img")).catch(
    (error: unknown) => error,
  );
  // The other records of the state folder, as the boot, the release and refresh write them (what they
  // hold does not matter here: the folder is refused first).
  const refused = (write: Promise<void>) => write.catch((error: unknown) => error);
  const others = [
    [await refused(writeRefreshState(prewarmDir, {} as RefreshState)), REFRESH_STATE_FILE],
    [await refused(writePreparedRecord(prewarmDir, {} as PreparedRecord)), PREPARED_FILE],
    [await refused(writeWorkspaceRecord(prewarmDir, {} as WorkspaceRecord)), RECORD_FILE],
    [await refused(writeReleaseRecord(prewarmDir, {} as ReleaseRecord)), RELEASE_RECORD_FILE],
  ] as const;
  t.test(
    "the state folder's files (prewarm's lock, state and mount run, the boot's, release's and refresh's records), " +
      "their folder not made on a full disk: the same typed error",
    async (t) => {
      for (const [error, file] of [
        [unmade, "prewarm.lock"],
        [unwritten, "prewarm.json"],
        [unrecorded, MOUNT_RUN_FILE],
        ...others,
      ] as const) {
        t.type(error, FolderNotWritableError, file);
        t.match((error as Error).message, `no space left on ${prewarmDir} (ENOSPC): ${file} not written`);
        t.match((error as FolderNotWritableError).remediation, `free space on the filesystem of ${noFolder} (df -h`);
      }
      t.type(unbegun, BuildNotBegunError, "snapshot build's work folder");
      t.match((unbegun as Error).message, `the build of ${join(noFolder, "pool.img")} could not begin`);
      t.same(await readdir(noFolder), [".filler"], "nothing made");
    },
  );

  const manifests = await fullFilesystem(t, "full-manifests", async () => undefined);
  const args = uploadArgs("full", lab.ec2.endpoint).map((a) =>
    a === join(work, "full.manifest.json") ? join(manifests, "full.manifest.json") : a,
  );
  const snapshotsBefore = new Set(Object.keys(lab.ec2.snapshotState().snapshots));
  const out = await agent(args, CREDENTIALS);
  const startedLeft = Object.keys(lab.ec2.snapshotState().snapshots).filter((id) => !snapshotsBefore.has(id));
  t.test("snapshot upload --manifest: exit 1", async (t) => {
    assertTold(t, out, ExitCode.failure, new RegExp(`no space left on ${manifests} \\(ENOSPC\\)`));
    t.same(await contents(manifests), {}, "no temp file left, no manifest half-written");
    // The first manifest write (`starting`, its ClientToken) comes before StartSnapshot: nothing is started.
    t.match(out.stderr, /nothing was started/);
    t.same(startedLeft, [], "no snapshot started, none left pending that no manifest names");
  });
});

/** Runs `each` over `items`, `size` at a time. */
async function inBatches<T>(items: T[], size: number, each: (item: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(each));
}
