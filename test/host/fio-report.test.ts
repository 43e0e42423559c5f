/**
 * Reports asked of a running fio (SIGUSR1), as the look at the wanted reads' queue asks for them: sent only once fio
 * catches the signal (its default action would end fio), answered with a report in `--status-interval`'s form, and
 * none of fio's own accord. The last case runs the real fio (a Debian package the CI installs) on a file.
 */
import t from "tap";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { RunningCommand } from "../../src/exec.ts";
import { catchesSigusr1, feedIolog, fioArgs, requestFioReport, runFio, type FioReport } from "../../src/host/fio.ts";

const status = (sigCgt: string) => `Name:\tfio\nState:\tS (sleeping)\nSigIgn:\t0000000000001000\nSigCgt:\t${sigCgt}\n`;

t.test("SIGUSR1 caught: bit 10 of the SigCgt mask, and nothing else decides", async (t) => {
  t.ok(catchesSigusr1(status("0000000100004202")), "fio 3.33's mask while it reads (INT, USR1, TERM, a real-time one)");
  t.ok(catchesSigusr1(status("0000000000000200")), "USR1 alone");
  t.notOk(catchesSigusr1(status("fffffffffffffdff")), "every other bit but USR1's");
  t.notOk(catchesSigusr1(status("")), "no mask");
  t.notOk(catchesSigusr1("Name:\tfio\nSigIgn:\t0000000000000200\n"), "ignored is not caught; no SigCgt line");
});

t.test("asking for a report: sent only while fio catches SIGUSR1, through its handle", async (t) => {
  const proc = mkdtempSync(join("/var/tmp", "fio-report-"));
  t.teardown(() => rmSync(proc, { recursive: true, force: true }));
  const sent: string[] = [];
  let exited = false;
  const fio: RunningCommand = {
    pid: 4242,
    signal: (signal) => {
      if (exited) return false;
      sent.push(signal);
      return true;
    },
  };
  t.equal(await requestFioReport(fio, proc), false, "no status to read: not sent");
  mkdirSync(join(proc, "4242"));
  writeFileSync(join(proc, "4242", "status"), status("0000000000000000"));
  t.equal(await requestFioReport(fio, proc), false, "handler not set yet (fio's start-up): not sent");
  t.same(sent, []);
  writeFileSync(join(proc, "4242", "status"), status("0000000100004202"));
  t.equal(await requestFioReport(fio, proc), true);
  t.same(sent, ["SIGUSR1"]);
  exited = true;
  t.equal(await requestFioReport(fio, proc), false, "exited: the handle sends nothing");
});

t.test("reports on request: no --status-interval in fio's arguments", async (t) => {
  const feed = feedIolog("/dev/nvme1n1", 1 << 20);
  t.notOk(
    fioArgs({ name: "prewarm-need", iolog: feed, ioDepth: 4 }).some((arg) => arg.startsWith("--status-interval")),
  );
  feed.end();
});

t.test("the real fio: a report for the request, none unasked, the final one at the end", async (t) => {
  try {
    execFileSync("fio", ["--version"]);
  } catch {
    t.fail("fio is not installed (apt-get install fio): this test needs the real one");
    return;
  }
  // On disk (O_DIRECT: tmpfs refuses it).
  const dir = mkdtempSync(join("/var/tmp", "fio-report-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, "data");
  writeFileSync(file, Buffer.alloc(1 << 20, 7));
  const feed = feedIolog(file, 64 * 1024);
  const reports: FioReport[] = [];
  let spawned: RunningCommand | undefined;
  const running = runFio(
    { name: "prewarm-need", iolog: feed, ioDepth: 2, thread: true },
    {
      reportsOnRequest: true,
      onStatus: (report) => reports.push(report),
      onSpawn: (fio) => (spawned = fio),
      timeoutMs: 60_000,
    },
  );
  feed.add(Array.from({ length: 8 }, (_, i) => ({ offset: i * 64 * 1024, length: 64 * 1024 })));
  // fio waits for the log's next part meanwhile: it runs until the log ends.
  let asked = false;
  for (let tries = 0; tries < 1000 && !asked; tries++) {
    await sleep(10);
    asked = spawned !== undefined && (await requestFioReport(spawned));
  }
  t.ok(asked, "fio caught SIGUSR1 within 10 s of its start");
  for (let waited = 0; reports.length === 0 && waited < 10_000; waited += 10) await sleep(10);
  t.equal(reports.length, 1, "one report for the request");
  await sleep(300);
  t.equal(reports.length, 1, "none of fio's own accord");
  feed.end();
  const final = await running;
  t.equal(final.read.totalIos, 8, "the final report counts every read");
});
