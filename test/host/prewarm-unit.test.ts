/**
 * ebs-cache-agent-prewarm.service through systemctl (src/host/prewarm-unit.ts), against a stand-in
 * systemctl that records its arguments and answers as systemctl does: the start only queued, the
 * stop waited for; a unit that is not installed is no run to stop (systemctl's exit 5, "not
 * loaded"), while any other failure of the stop is told, so a release refuses to unmount under it.
 */
import t from "tap";
import { chmod, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createPrewarmUnit, PrewarmUnitError, PREWARM_UNIT } from "../../src/host/prewarm-unit.ts";
import { createMemoryLogger } from "../../src/log.ts";

/** A systemctl that appends its arguments to `calls` and exits with `code`, printing `stderr`. */
async function fakeSystemctl(dir: string, code: number, stderr = ""): Promise<{ path: string; calls: string }> {
  const path = join(dir, "systemctl");
  const calls = join(dir, "calls");
  await writeFile(path, `#!/bin/sh\necho "$*" >> '${calls}'\nprintf '%s\\n' '${stderr}' >&2\nexit ${code}\n`);
  await chmod(path, 0o755);
  return { path, calls };
}

t.test("start queues the unit's start (--no-block); stop waits for the stop job", async (t) => {
  const { path, calls } = await fakeSystemctl(t.testdir(), 0);
  const unit = createPrewarmUnit({ systemctl: path });
  await unit.start();
  await unit.stop();
  t.same((await readFile(calls, "utf8")).trim().split("\n"), [
    `start --no-block ${PREWARM_UNIT}`,
    `stop ${PREWARM_UNIT}`,
  ]);
});

t.test("a unit that is not installed: no run to stop, the stop resolves", async (t) => {
  const { path } = await fakeSystemctl(
    t.testdir(),
    5,
    `Failed to stop ${PREWARM_UNIT}: Unit ${PREWARM_UNIT} not loaded.`,
  );
  const log = createMemoryLogger("debug");
  await t.resolves(createPrewarmUnit({ systemctl: path, log }).stop());
  t.match(log.lines.join("\n"), /not installed: no run to stop/);
});

t.test("a start of a unit that is not installed fails (the boot logs it and goes on)", async (t) => {
  const { path } = await fakeSystemctl(
    t.testdir(),
    5,
    `Failed to start ${PREWARM_UNIT}: Unit ${PREWARM_UNIT} not found.`,
  );
  await t.rejects(createPrewarmUnit({ systemctl: path }).start(), PrewarmUnitError);
});

t.test("a stop that fails otherwise is told, with the unit to look at", async (t) => {
  for (const [code, stderr] of [
    [1, `Job for ${PREWARM_UNIT} canceled.`],
    [5, "Failed to connect to bus: No such file or directory"],
  ] as const) {
    const { path } = await fakeSystemctl(t.testdir(), code, stderr);
    const error = await createPrewarmUnit({ systemctl: path })
      .stop()
      .catch((e: unknown) => e);
    t.type(error, PrewarmUnitError, `exit ${code}: ${stderr}`);
    t.match((error as Error).message, new RegExp(`exited with ${code}`));
    t.match((error as PrewarmUnitError).remediation, /journalctl -u ebs-cache-agent-prewarm.service/);
  }
});

t.test("no systemctl at all: told as such", async (t) => {
  const error = await createPrewarmUnit({ systemctl: join(t.testdir(), "missing") })
    .stop()
    .catch((e: unknown) => e);
  t.type(error, PrewarmUnitError);
  t.match((error as PrewarmUnitError).remediation, /systemd/);
});
