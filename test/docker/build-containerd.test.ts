/**
 * The private containerd of `snapshot build` (containerd store), as planned before it starts: its
 * command line keeps everything but its root in the build's folder, its config leaves out the
 * plugins that would write elsewhere, and the build's dockerd uses it in the default namespace.
 * The daemons themselves run in test/lab/machines/nspawn-golden.lab.test.ts (docker 28).
 */
import t from "tap";
import {
  BUILD_CONTAINERD_DISABLED_PLUGINS,
  buildContainerdArgs,
  buildContainerdConfig,
  buildContainerdPaths,
} from "../../src/docker/build-containerd.ts";
import { buildDockerdArgs, MAX_DOCKERD_ROOT_LENGTH } from "../../src/docker/build-dockerd.ts";

const root = "/b/gen.img.build/d";

t.test("containerd's socket, state and config in the build's folder; its root where it is asked", async (t) => {
  const args = buildContainerdArgs(root, "/b/gen.img.build/mnt/containerd");
  const flag = (name: string) => args[args.indexOf(name) + 1];
  t.equal(flag("--root"), "/b/gen.img.build/mnt/containerd");
  for (const name of ["--config", "--address", "--state"]) t.ok(flag(name)?.startsWith(`${root}/`), name);
  t.notMatch(args.join(" "), /\/run\/containerd|\/var\/lib\/containerd|\/etc\/containerd/);
  // The longest socket containerd makes is its ttrpc one, beside the grpc socket.
  const longest = "/".repeat(MAX_DOCKERD_ROOT_LENGTH);
  t.ok(`${buildContainerdPaths(longest).socket}.ttrpc`.length <= 107, "its sockets fit any accepted work folder");
});

t.test("its config: version 2, the CRI and /opt plugins off", async (t) => {
  const config = buildContainerdConfig();
  t.match(config, /^version = 2$/m, "containerd 1.7 reads it; 2.x migrates it");
  for (const plugin of BUILD_CONTAINERD_DISABLED_PLUGINS) t.ok(config.includes(JSON.stringify(plugin)), plugin);
  t.ok(BUILD_CONTAINERD_DISABLED_PLUGINS.includes("io.containerd.internal.v1.opt"), "no /opt/containerd");
  t.notMatch(config, /^root|^state/m, "root and state come from the command line only");
});

t.test("the build's dockerd on its own containerd: that socket, the default namespace", async (t) => {
  const socket = buildContainerdPaths(root).socket;
  const args = buildDockerdArgs(root, socket);
  t.equal(args[args.indexOf("--containerd") + 1], socket);
  t.notOk(args.includes("--containerd-namespace"), "moby, the namespace a host's dockerd reads the images in");
});
