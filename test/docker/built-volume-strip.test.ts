import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { stripBuiltVolume } from "../../src/docker/built-volume-strip.ts";

async function volume(t: { teardown(fn: () => unknown): void }, folders: string[]): Promise<string> {
  const mount = await mkdtemp(join(tmpdir(), "built-strip-"));
  t.teardown(() => rm(mount, { recursive: true, force: true }));
  for (const folder of folders) await mkdir(join(mount, folder), { recursive: true });
  await writeFile(join(mount, "docker", "engine-id"), "id\n");
  return mount;
}

const DOCKER_KEPT = ["docker/image/overlay2/layerdb", "docker/overlay2", "docker/volumes"];
const DOCKER_LOCAL = ["docker/swarm", "docker/buildkit", "docker/runtimes", "docker/tmp", "docker/containers/abc"];

t.test("graphdriver: the boot's list, dockerd's own state and its containerd go; the images stay", async (t) => {
  const mount = await volume(t, [...DOCKER_KEPT, ...DOCKER_LOCAL, "docker/containerd/daemon", "docker/volumes/v"]);
  const removed = await stripBuiltVolume(join(mount, "docker"), "graphdriver");
  for (const name of ["swarm", "engine-id", "buildkit", "runtimes", "tmp", "containerd", "containers/abc", "volumes/v"])
    t.ok(removed.includes(name), `${name} removed`);
  t.same((await readdir(join(mount, "docker"))).sort(), ["containers", "image", "overlay2", "volumes"]);
});

t.test("containerd store: containerd's instance state beside the data-root goes, its content stays", async (t) => {
  const containerd = [
    "containerd/io.containerd.metadata.v1.bolt",
    "containerd/io.containerd.content.v1.content",
    "containerd/io.containerd.grpc.v1.introspection",
    "containerd/tmpmounts",
  ];
  const mount = await volume(t, [...DOCKER_KEPT, ...DOCKER_LOCAL, ...containerd]);
  const removed = await stripBuiltVolume(join(mount, "docker"), "containerd");
  t.ok(removed.includes("../containerd/io.containerd.grpc.v1.introspection"));
  t.ok(removed.includes("../containerd/tmpmounts"));
  t.ok(removed.includes("buildkit"));
  t.same((await readdir(join(mount, "containerd"))).sort(), [
    "io.containerd.content.v1.content",
    "io.containerd.metadata.v1.bolt",
  ]);
});

t.test("a folder that is no data-root is refused and left as it was", async (t) => {
  const mount = await volume(t, ["docker/swarm"]);
  await t.rejects(stripBuiltVolume(join(mount, "docker"), "graphdriver"), /no image\/ folder/);
  t.same((await readdir(join(mount, "docker"))).sort(), ["engine-id", "swarm"]);
});
