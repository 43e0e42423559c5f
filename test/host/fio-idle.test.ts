/** The pre-warm's long reads ask fio for the idle I/O class; the sample does not (it measures the device). */
import t from "tap";
import { fioArgs } from "../../src/host/fio.ts";

t.test("idle: --prioclass=3 on the replayed reads only when asked", async (t) => {
  const idle = fioArgs({ name: "prewarm-files", iolog: "/tmp/x.iolog", ioDepth: 2, idle: true });
  t.ok(idle.includes("--prioclass=3"));
  t.ok(idle.includes("--readonly"), "still read-only");
  t.notOk(fioArgs({ name: "prewarm-check", iolog: "/tmp/x.iolog", ioDepth: 16 }).includes("--prioclass=3"));
});
