/**
 * The pre-claim host check and the label read-back in the lab, against the EC2 emulator and a
 * real private dockerd: a host whose dockerd would refuse the switch (a --label flag next to the
 * engine labels the agent writes, the legacy `graph` key, a dockerd reading another
 * daemon.json) degrades before any EC2 write, daemon.json byte-for-byte unchanged, the pool
 * volume still available and not blamed; labels published on a real dockerd are read back from
 * `docker info`, and labels that do not show are an error.
 */
import t, { type Test } from "tap";
import { existsSync } from "node:fs";
import { copyFile, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createReporter, LabelsNotTakenError } from "../../../src/docker/readiness-labels.ts";
import { engineLabelsProblem } from "../../../src/docker/dockerd-flags.ts";
import { createDaemonConfig } from "../../../src/docker/daemon-json.ts";
import { createDockerEngine } from "../../../src/docker/engine.ts";
import { ExitCode } from "../../../src/errors.ts";
import type { LabHost } from "../../../src/lab/lab.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import {
  goldenPoolTags,
  labelRecord,
  LABEL_PREFIX,
  mountsUnder,
  POOL,
  startBootLab,
  type BootLab,
  type InProcessBoot,
} from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

// No golden snapshot: nothing here gets as far as reading a volume.
const bl: BootLab = await startBootLab({ name: "test-preflight", golden: false });
t.teardown(() => bl.close());
const poolVolume = await bl.createBlankVolume(goldenPoolTags(POOL, undefined));

/** EC2 calls that change something (anything but Describe*). */
const writes = () => bl.calls.filter((call) => !call.command.startsWith("Describe")).map((call) => call.command);

async function assertRefusedBeforeClaiming(
  t: Test,
  host: LabHost,
  booted: InProcessBoot,
  before: { daemonJson: string; attachRequests: number; writes: number },
) {
  t.equal(
    booted.report?.outcome,
    "degraded",
    "outcome degraded",
    booted.report?.outcome === "degraded" ? {} : { log: booted.log.join("\n") },
  );
  t.equal(booted.exitCode, ExitCode.degraded, "exit code 4");
  t.equal(bl.emulatorAttachRequests(), before.attachRequests, "the emulator saw no AttachVolume");
  t.same(writes().slice(before.writes), [], "no EC2 write at all");
  t.equal(await readFile(host.paths.daemonJson, "utf8"), before.daemonJson, "daemon.json byte-for-byte unchanged");
  t.notOk(existsSync(`${host.paths.daemonJson}.ebs-cache-agent.bak`), "no backup taken: nothing was written");
  t.equal((await bl.describe(poolVolume)).State, "available", "the pool volume is still available");
  t.notOk((await bl.tags(poolVolume))[VolumeTag.lastError], "and not blamed with a last-error tag");
  t.same(await mountsUnder(host.paths.mountRoot), [], "nothing mounted");
  t.ok(
    booted.log.some((line) => line.startsWith("<3>boot.failed:") && line.includes("no volume was claimed")),
    "one error line says why",
  );
}

const snapshot = async (host: LabHost) => ({
  daemonJson: await readFile(host.paths.daemonJson, "utf8"),
  attachRequests: bl.emulatorAttachRequests(),
  writes: writes().length,
});

t.test(
  "dockerd started with --label while the agent publishes engine labels: refused before claiming, the running " +
    "docker untouched",
  async (t) => {
    const host = await bl.addHost({ dockerdArgs: ["--label", "rack=a1"] });
    const dockerd = await host.startDocker();
    const pid = dockerd.pid;
    const before = await snapshot(host);
    const booted = await bl.boot(host, { overrides: { pool: POOL } });
    await assertRefusedBeforeClaiming(t, host, booted, before);
    t.match(
      booted.report?.reason,
      new RegExp(
        String.raw`--label rack=a1 \(the lab dockerd's command line.*\) and "labels" ` +
          String.raw`in .*daemon\.json \(the agent sets it\): dockerd refuses to ` +
          String.raw`start when a directive is given both as a flag and in its configuration ` +
          String.raw`file`,
      ),
    );
    t.equal(dockerd.pid, pid, "docker was not restarted");
    t.same(
      labelRecord((await dockerd.info()).Labels),
      { rack: "a1" },
      "its labels are still the flag's, nothing of the agent's",
    );
  },
);

t.test("the legacy graph key in daemon.json: refused before claiming with the rename as remediation", async (t) => {
  const host = await bl.addHost();
  await writeFile(host.paths.daemonJson, JSON.stringify({ graph: host.paths.defaultDataRoot }, null, 2) + "\n");
  const before = await snapshot(host);
  // docker.control none: the lab's dockerd would otherwise add its own keys to the file when degrade starts it.
  const booted = await bl.boot(host, { overrides: { pool: POOL, docker: { control: "none" } } });
  await assertRefusedBeforeClaiming(t, host, booted, before);
  t.match(booted.report?.reason, /sets the legacy "graph" key/);
  t.ok(
    booted.log.some(
      (line) =>
        line.includes('rename \\"graph\\" to \\"data-root\\"') || line.includes('rename "graph" to "data-root"'),
    ),
    "the remediation says to rename it",
  );
});

t.test("dockerd reading another daemon.json than the agent's: refused before claiming", async (t) => {
  const host = await bl.addHost();
  const agentsCopy = join(host.paths.hostRoot, "etc/docker/agent-daemon.json");
  await copyFile(host.paths.daemonJson, agentsCopy);
  const before = await snapshot(host);
  const booted = await bl.boot(host, {
    overrides: { pool: POOL, docker: { control: "none" }, paths: { daemonJson: agentsCopy } },
  });
  await assertRefusedBeforeClaiming(t, host, booted, before);
  t.match(
    booted.report?.reason,
    /dockerd reads .*\/etc\/docker\/daemon\.json \(--config-file .*\), not .*agent-daemon\.json/,
  );
});

t.test("label read-back on a real dockerd", async (t) => {
  const host = await bl.addHost();
  const dockerd = await host.startDocker();
  const log = createMemoryLogger("debug");
  const engine = createDockerEngine({ host: host.dockerHost, log });
  const deps = {
    prefix: LABEL_PREFIX,
    mode: "engine" as const,
    engine,
    docker: host.dockerService(),
    log,
    readBackTimeoutMs: 3000,
  };

  const report = createReporter({ ...deps, daemonConfig: createDaemonConfig({ path: host.paths.daemonJson, log }) });
  await report("ready", { "volume-id": "vol-0123456789abcdef0", pool: POOL, kind: "pool" });
  t.same(
    labelRecord((await dockerd.info()).Labels),
    {
      [`${LABEL_PREFIX}.state`]: "ready",
      [`${LABEL_PREFIX}.volume-id`]: "vol-0123456789abcdef0",
      [`${LABEL_PREFIX}.pool`]: POOL,
      [`${LABEL_PREFIX}.kind`]: "pool",
    },
    "docker info shows them",
  );
  t.ok(
    log.lines.some((line) => line.includes("engine labels set and read back")),
    "and the log says they were read back",
  );

  // The agent writing a file dockerd does not read: the reload succeeds, the labels never show.
  const elsewhere = join(host.paths.hostRoot, "etc/docker/not-read.json");
  await copyFile(host.paths.daemonJson, elsewhere);
  let infoReads = 0;
  const counting = {
    ...engine,
    info: () => {
      infoReads++;
      return engine.info();
    },
  };
  const lost = createReporter({
    ...deps,
    engine: counting,
    daemonConfig: createDaemonConfig({ path: elsewhere, log }),
  });
  const started = Date.now();
  const error = await lost("degraded", { reason: "test" }).catch((e: unknown) => e);
  t.type(error, LabelsNotTakenError, "labels that do not show are an error");
  t.match(
    (error as Error).message,
    new RegExp(
      String.raw`docker info's Labels still differ from what was published after ` +
        String.raw`3000 ms: io\.simcore\.ebs-cache\.state=ready \(published degraded\)`,
    ),
  );
  // Bounded by the read-back deadline: it read back until then, backing off, and gave up. Told by the
  // reads, not by how long the call took (docker's answers on a loaded machine are not the reporter's):
  // one `docker info` to choose the mode, then read-backs 100 ms, 200 ms ... 1 s apart: at most 7 within
  // the 3 s, and one more should a timer end a hair before the deadline.
  t.ok(Date.now() - started >= 3000, "it read back until the deadline");
  t.ok(infoReads >= 2 && infoReads <= 9, `then gave up (docker info read ${infoReads} times)`);
  t.equal(
    labelRecord((await dockerd.info()).Labels)[`${LABEL_PREFIX}.state`],
    "ready",
    "docker still shows the old state",
  );
});

t.test(
  "a --label flag: the reporter writes no engine labels (dockerd would refuse the file at the reload and the " +
    "next start)",
  async (t) => {
    const host = await bl.addHost({ dockerdArgs: ["--label=rack=b2"] });
    const dockerd = await host.startDocker();
    const log = createMemoryLogger("debug");
    const before = await readFile(host.paths.daemonJson, "utf8");
    const report = createReporter({
      prefix: LABEL_PREFIX,
      mode: "engine",
      engine: createDockerEngine({ host: host.dockerHost, log }),
      daemonConfig: createDaemonConfig({ path: host.paths.daemonJson, log }),
      docker: host.dockerService(),
      log,
      engineLabelsProblem: () =>
        engineLabelsProblem({
          dockerdCommand: async () => host.dockerdCommand(),
          daemonJsonPath: host.paths.daemonJson,
        }),
    });
    await t.rejects(report("ready", {}), /engine labels not written: --label=rack=b2/);
    t.equal(await readFile(host.paths.daemonJson, "utf8"), before, "daemon.json unchanged");
    await dockerd.restart();
    t.same(labelRecord((await dockerd.info()).Labels), { rack: "b2" }, "docker still starts");
  },
);

t.test(
  "dockerd's own rule, on the real binary: a flag and its daemon.json key refuse the start; --add-runtime and " +
    "runtimes combine",
  async (t) => {
    const cases = [
      {
        flags: ["--label", "rack=c3"],
        key: { labels: ["zone=z"] },
        refused: /the following directives are specified both as a flag and in the configuration file: labels/,
      },
      {
        flags: ["-s", "vfs"],
        key: { "storage-driver": "vfs" },
        refused: /specified both as a flag and in the configuration file: storage-driver/,
      },
      {
        flags: ["--add-runtime", "lab=/usr/bin/runc"],
        key: { runtimes: { other: { path: "/usr/bin/runc" } } },
        refused: undefined,
      },
    ];
    for (const c of cases) {
      const host = await bl.addHost({ dockerdArgs: c.flags });
      const config = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
      await writeFile(host.paths.daemonJson, JSON.stringify({ ...config, ...c.key }, null, 2) + "\n");
      const started = host.startDocker();
      if (c.refused)
        await t.rejects(
          started,
          c.refused,
          `${c.flags.join(" ")} with ${Object.keys(c.key).join()} in daemon.json: dockerd refuses to start`,
        );
      else
        await t.resolves(
          started,
          `${c.flags.join(" ")} with ${Object.keys(c.key).join()} in daemon.json: dockerd starts`,
        );
    }
  },
);
