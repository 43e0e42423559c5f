/**
 * The pre-warm's progress line goes to systemd's STATUS= as well as the journal (the host's
 * `serviceStatus`, set under a unit that takes notifications), so that `systemctl status` shows how
 * far the reads are: inline at the boot (src/agent/boot/compose.ts) and in the background run
 * (src/agent/prewarm/run.ts). Against the port fakes; no root, no fio, no systemd (the notifier
 * itself: src/host/systemd-notify.ts; under a real unit: test/lab/machines/nspawn-machines.ts).
 */
import t from "tap";
import type { HostAdapters } from "../../../src/agent/adapters.ts";
import { runBoot } from "../../../src/agent/boot/run.ts";
import type { PrewarmReport } from "../../../src/agent/prewarm/plan.ts";
import { runPrewarm } from "../../../src/agent/prewarm/run.ts";
import { POOL } from "../../fixtures/lab/background-prewarm.ts";
import { COLD, WARM, fakeNode, fakeReader, type FakeNode } from "../../fixtures/fakes/index.ts";

/** The progress lines the log got, as the journal shows their text. */
const progressLines = (node: FakeNode) => node.log.lines.flatMap((line) => line.split("prewarm.progress: ").slice(1));

t.test("inline at the boot: each progress line the journal gets is the unit's status too", async (t) => {
  const node = await fakeNode(t, { config: { prewarm: { strategy: "files" } } });
  await node.fake.snapshot({ ...POOL });
  const statuses: string[] = [];
  const adapters = node.adapters({
    reader: fakeReader(node.script, { figures: [COLD, WARM] }).reader,
    serviceStatus: (text) => statuses.push(text),
  });

  const booted = await runBoot(node.config, adapters, { dryRun: false });
  t.equal(booted.report?.outcome, "ready", booted.report?.reason ?? "ready");
  t.ok(statuses.length > 0, "the unit was told the progress");
  t.match(statuses.at(-1), /^100\.0 % \(64 MiB of 64 MiB\)/, "the last status: all read");
  for (const status of statuses)
    t.ok(
      progressLines(node).some((line) => line?.startsWith(status)),
      `"${status}" is a progress line of the journal`,
    );
});

t.test("in the background run: the status follows its reads", async (t) => {
  const node = await fakeNode(t, { config: { prewarm: { strategy: "files" } } });
  await node.fake.snapshot({ ...POOL });
  const statuses: string[] = [];
  let background: Promise<PrewarmReport | undefined> | undefined;
  const adapters: HostAdapters = node.adapters({
    reader: fakeReader(node.script, { figures: [COLD, WARM] }).reader,
    startPrewarm: async () => {
      // The detached run inherits the unit's NOTIFY_SOCKET: its host has a serviceStatus too.
      const own: HostAdapters = { ...adapters, serviceStatus: (text) => statuses.push(text) };
      background = runPrewarm(node.config, own).then((outcome) => outcome.report);
    },
  });

  const booted = await runBoot(node.config, adapters, { dryRun: false });
  t.equal(booted.report?.outcome, "warming", booted.report?.reason ?? "warming");
  const outcome = await background;
  t.equal(outcome?.phase, "done", outcome?.error ?? "done");
  t.match(statuses.at(-1), /^100\.0 % \(64 MiB of 64 MiB\)/, "the last status: all read");
  t.equal(statuses.length, progressLines(node).length, "one status per progress line");
});
