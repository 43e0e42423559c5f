/**
 * The golden build's trace, read and ordered (src/host/read-trace.ts): strace's lines
 * as version 6 writes them, the host's own opens and execs left out, each file once.
 */
import t from "tap";
import { firstReads, needListText, parseTrace, withImageReads } from "../../../src/host/read-trace.ts";
import { MAX_READ_LIST_FILES, parseReadList, readListText } from "../../../src/agent/prewarm/need.ts";

const ROOT = "/var/tmp/record-reads-x/merged";
const LOG = [
  `10 execve("/usr/bin/timeout", ["/usr/bin/timeout"], 0x55 /* 1 var */) = 0`,
  `10 openat(AT_FDCWD</tmp>, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3</etc/ld.so.cache>`,
  `11 execve("/usr/bin/unshare", ["/usr/bin/unshare"], 0x7f /* 1 var */) = 0`,
  `12 chroot("${ROOT}")     = 0`,
  `12 execve("/bin/sh", ["sh", "-c", "cat /app/b"...], 0x19 /* 1 var */) = 0`,
  `12 openat(AT_FDCWD<${ROOT}>, "/app/b.txt", O_RDONLY) = 3<${ROOT}/app/b.txt>`,
  `13 open("/lib/x.so", O_RDONLY) = 4<${ROOT}/usr/lib/x\\x20y.so>`,
  `12 openat2(AT_FDCWD<${ROOT}>, "a", {flags=O_RDONLY}, 24) = 5<${ROOT}/app/a.txt>`,
  `12 openat(AT_FDCWD<${ROOT}>, "/app/b.txt", O_RDONLY) = 3<${ROOT}/app/b.txt>`,
  `12 openat(AT_FDCWD<${ROOT}>, "/app/log", O_WRONLY|O_CREAT|O_APPEND, 0666) = 6<${ROOT}/app/log>`,
  `12 --- SIGCHLD {si_signo=SIGCHLD} ---`,
  `12 +++ exited with 0 +++`,
  "",
].join("\n");

t.test("the run's opens (below its root, not write-only) and its execs after the chroot, in order", async (t) => {
  t.same(parseTrace(LOG, ROOT), [
    { kind: "exec", path: "bin/sh" },
    { kind: "open", path: "app/b.txt" },
    { kind: "open", path: "usr/lib/x y.so" },
    { kind: "open", path: "app/a.txt" },
    { kind: "open", path: "app/b.txt" },
  ]);
  t.same(
    parseTrace(LOG.replace(/\d+ chroot.*\n/, ""), ROOT).filter((e) => e.kind === "exec"),
    [],
    "no exec counts before a chroot",
  );
});

t.test("each layer file once, in first-read order; paths no layer holds left out", async (t) => {
  const layer = (path: string) =>
    path.startsWith("tmp/") ? undefined : `overlay2/L/diff/${path === "bin/sh" ? "bin/busybox" : path}`;
  const files = firstReads(
    [{ path: "bin/sh" }, { path: "app/b.txt" }, { path: "tmp/out" }, { path: "app/a.txt" }, { path: "app/b.txt" }],
    layer,
  );
  t.same(files, ["overlay2/L/diff/bin/busybox", "overlay2/L/diff/app/b.txt", "overlay2/L/diff/app/a.txt"]);
});

t.test("an image's entry replaces its old one, keeps the others', and the list validates", async (t) => {
  let list = withImageReads(undefined, "lab/a:1", ["docker/overlay2/L/diff/x"]);
  list = withImageReads(list, "lab/b:1", ["containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/3/fs/y"]);
  list = withImageReads(list, "docker.io/lab/a:1", ["docker/overlay2/L/diff/z"]);
  t.same(
    list.images.map((e) => [e.image, e.files]),
    [
      ["lab/b:1", ["containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/3/fs/y"]],
      ["docker.io/lab/a:1", ["docker/overlay2/L/diff/z"]],
    ],
  );
  t.same(parseReadList(readListText(list)), list);
});

t.test("stored only as the boot will read it: a file it refuses left out, a list it refuses not made", async (t) => {
  const ok = "docker/overlay2/L/diff/bin/sh";
  const stored = needListText(undefined, "lab/a:1", [ok, "docker/overlay2/L/diff/a\nb", `docker/${"x".repeat(5000)}`]);
  t.equal(stored.dropped, 2, "a control character, a path past the bound");
  t.same(parseReadList(stored.text), { images: [{ image: "lab/a:1", files: [ok] }] });

  const others = {
    images: [{ image: "lab/a:1", files: Array.from({ length: MAX_READ_LIST_FILES - 10 }, (_, i) => `docker/f${i}`) }],
  };
  const many = Array.from({ length: 11 }, (_, i) => `docker/g${i}`);
  t.throws(() => needListText(others, "lab/b:1", many), { name: "AgentError", message: /lab\/b:1.*more than/ });
  t.equal(needListText(others, "lab/b:1", many.slice(1)).dropped, 0, "up to the bound: stored");
  t.throws(() => needListText(undefined, "Lab/B:1", [ok]), { name: "AgentError", message: /must be lowercase/ });
});
