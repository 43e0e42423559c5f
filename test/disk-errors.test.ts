/**
 * The disk failure an error is, by its class: real failures from the kernel and from a child
 * process (/dev/full answers every write with ENOSPC), and the shapes the agent's errors wrap them in.
 */
import { writeFile } from "node:fs/promises";
import t from "tap";
import { describeDiskError, diskErrorKind } from "../src/disk-errors.ts";
import { AgentError, CommandError } from "../src/errors.ts";
import { run } from "../src/exec.ts";

t.test("a write the kernel refuses for space is no-space, however it is wrapped", async (t) => {
  const refused = await writeFile("/dev/full", "x").then(
    () => undefined,
    (error: unknown) => error,
  );
  t.match(refused, { code: "ENOSPC" }, "the kernel's answer");
  t.equal(diskErrorKind(refused), "no-space");
  t.equal(diskErrorKind(new AgentError("could not record it", "x", 1, { cause: refused })), "no-space", "as a cause");
  t.equal(
    diskErrorKind(new Error("outer", { cause: new Error("middle", { cause: refused }) })),
    "no-space",
    "two causes down",
  );
  t.equal(diskErrorKind(new AggregateError([new Error("other"), refused])), "no-space", "among several");
});

t.test("a child process that met a full disk says so in its words: no-space", async (t) => {
  const failed = await run("dd", ["if=/dev/zero", "of=/dev/full", "bs=1", "count=1"]).then(
    () => undefined,
    (error: unknown) => error,
  );
  t.type(failed, CommandError);
  t.match((failed as CommandError).stderr, /No space left on device/, "dd's own words");
  t.equal(diskErrorKind(failed), "no-space");
});

t.test("each class by its errno name and by strerror's words", async (t) => {
  const errno = (code: string) => Object.assign(new Error(`${code}: some call`), { code });
  t.equal(diskErrorKind(errno("ENOSPC")), "no-space");
  t.equal(diskErrorKind(errno("EDQUOT")), "no-space", "a quota reached is the same state for the writer");
  t.equal(diskErrorKind(errno("EROFS")), "read-only");
  t.equal(diskErrorKind(new Error("write /var/lib/docker/x: disk quota exceeded")), "no-space");
  t.equal(diskErrorKind(new Error("mkdir: cannot create directory 'a': Read-only file system")), "read-only");
  t.equal(
    diskErrorKind(new CommandError(["xfs_growfs", "/m"], 1, "xfs_growfs: No space left on device", "x")),
    "no-space",
  );
  t.equal(diskErrorKind("Error response from daemon: no space left on device"), "no-space", "a bare string");
});

t.test("anything else is none of them", async (t) => {
  t.equal(diskErrorKind(Object.assign(new Error("EACCES: permission denied"), { code: "EACCES" })), undefined);
  t.equal(diskErrorKind(new Error("device never appeared")), undefined);
  t.equal(diskErrorKind(undefined), undefined);
  t.equal(diskErrorKind(42), undefined);
  const cycle: { message: string; cause?: unknown } = { message: "a" };
  cycle.cause = cycle;
  t.equal(diskErrorKind(cycle), undefined, "a cause cycle ends");
});

t.test("in words", async (t) => {
  t.equal(describeDiskError("no-space"), "no space left");
  t.equal(describeDiskError("read-only"), "read-only filesystem");
});
