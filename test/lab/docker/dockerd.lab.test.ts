import t from "tap";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { run } from "../../../src/exec.ts";
import {
  dockerdService,
  privateDockerdProcesses,
  startPrivateDockerd,
  type PrivateDockerd,
} from "../../../src/lab/docker/dockerd.ts";
import { buildImage, initSwarm, leaveSwarm } from "../../../src/lab/docker/images.ts";
import { assertDockerPrerequisites } from "../../fixtures/lab/lab-prereq.ts";

assertDockerPrerequisites("test/lab/docker/dockerd.lab.test.ts");

/** What the host's own docker owns; none of it may appear because of the lab. */
const HOST_DOCKER_PATHS = ["/var/run/docker.sock", "/etc/docker/key.json", "/var/lib/docker", "/run/containerd"];
const hostBefore = new Map(HOST_DOCKER_PATHS.map((path) => [path, existsSync(path)]));
const hostLinksBefore = await hostLinkNames();

const top = await mkdtemp("/var/tmp/ebs-cache-lab-test-");
const root = join(top, "dockerd");
const configFile = join(top, "daemon.json");
let dockerd: PrivateDockerd | undefined;

t.teardown(async () => {
  await dockerd?.stop();
  await rm(top, { recursive: true, force: true });
});

async function hostLinkNames(): Promise<string[]> {
  const { stdout } = await run("ip", ["-o", "link", "show"]);
  return stdout.split("\n").map((line) => line.split(":")[1]?.trim().split("@")[0] ?? "");
}

async function setDaemonConfig(update: Record<string, unknown>): Promise<void> {
  const current = JSON.parse(await readFile(configFile, "utf8")) as Record<string, unknown>;
  await writeFile(configFile, JSON.stringify({ ...current, ...update }, null, 2));
}

function current(): PrivateDockerd {
  if (!dockerd) throw new Error("dockerd did not start");
  return dockerd;
}

t.test("a private dockerd starts on the data-root of its config file", async (t) => {
  await writeFile(configFile, JSON.stringify({ "data-root": join(top, "data-a") }));
  dockerd = await startPrivateDockerd({ root, configFile });
  const info = await dockerd.info();
  t.equal(info.DockerRootDir, join(top, "data-a"));
  t.equal(info.Driver, "overlay2");
  t.equal(dockerd.host, `unix://${root}/docker.sock`);
  t.ok(existsSync(dockerd.socket));
  t.equal(Number((await readFile(join(root, "dockerd.pid"), "utf8")).trim()), dockerd.pid, "pidfile holds the pid");
  t.ok(existsSync(join(root, "dockerd.log")));
  const config = JSON.parse(await readFile(configFile, "utf8")) as Record<string, unknown>;
  t.equal(config["data-root"], join(top, "data-a"), "the data-root set in the file is kept");
  t.equal(config["deprecated-key-path"], join(root, "key.json"), "the trust key is kept out of /etc/docker");
  const { stdout } = await dockerd.docker(["version", "--format", "{{.Server.Version}}"]);
  t.match(stdout, /^20\.10\./);
  t.equal(await dockerdService(dockerd).isActive(), true);
});

t.test("a built image runs with no network", async (t) => {
  const workDir = join(top, "work");
  const id = await buildImage(current(), { tag: "lab/hello:1", workDir, payloadBytes: 3 * 1024 * 1024 });
  t.match(id, /^sha256:[0-9a-f]{64}$/);
  const hi = await current().docker(["run", "--rm", "--network", "none", "lab/hello:1", "echo", "hi"]);
  t.equal(hi.stdout, "hi");
  const marker = await current().docker(["run", "--rm", "lab/hello:1", "cat", "/etc/ebs-cache-lab-image"]);
  t.match(marker.stdout, /seed=lab\/hello:1/);
  const ls = await current().docker(["run", "--rm", "--network", "host", "lab/hello:1", "ls", "-l", "/payload"]);
  t.match(ls.stdout, /blob-000\.bin/);
  const size = await current().docker(["image", "inspect", "--format", "{{.Size}}", "lab/hello:1"]);
  t.ok(Number(size.stdout) >= 3 * 1024 * 1024, "the payload is in the image");
  t.same(await readdir(workDir), [], "the temporary rootfs and tarball are removed");
});

t.test("the same seed gives the same layer, another seed another one", async (t) => {
  const layer = async (tag: string) =>
    (await current().docker(["image", "inspect", "--format", "{{json .RootFS.Layers}}", tag])).stdout;
  const workDir = join(top, "work");
  await buildImage(current(), { tag: "lab/seeded:a", workDir, payloadBytes: 1024 * 1024, seed: "s1" });
  await buildImage(current(), { tag: "lab/seeded:b", workDir, payloadBytes: 1024 * 1024, seed: "s1" });
  await buildImage(current(), { tag: "lab/seeded:c", workDir, payloadBytes: 1024 * 1024, seed: "s2" });
  t.equal(await layer("lab/seeded:a"), await layer("lab/seeded:b"));
  t.not(await layer("lab/seeded:a"), await layer("lab/seeded:c"));
});

t.test("restart applies a new data-root from daemon.json, and switching back finds the images", async (t) => {
  const dockerd = current();
  const firstPid = dockerd.pid;
  await setDaemonConfig({ "data-root": join(top, "data-b") });
  await dockerd.restart();
  t.not(dockerd.pid, firstPid, "a new process");
  t.equal((await dockerd.info()).DockerRootDir, join(top, "data-b"));
  const missing = await dockerd.docker(["image", "inspect", "lab/hello:1"], { check: false });
  t.not(missing.exitCode, 0, "the image is not on the new data-root");

  await setDaemonConfig({ "data-root": join(top, "data-a") });
  await dockerdService(dockerd).restart();
  t.equal((await dockerd.info()).DockerRootDir, join(top, "data-a"));
  const hi = await dockerd.docker(["run", "--rm", "--network", "none", "lab/hello:1", "echo", "back"]);
  t.equal(hi.stdout, "back");
});

t.test("reload applies daemon.json labels without a restart", async (t) => {
  const dockerd = current();
  const pid = dockerd.pid;
  await setDaemonConfig({ labels: ["ebs-cache.volume=vol-0abc", "ebs-cache.state=ready"] });
  await dockerd.reload();
  t.same((await dockerd.info()).Labels.sort(), ["ebs-cache.state=ready", "ebs-cache.volume=vol-0abc"]);
  t.equal(dockerd.pid, pid, "same process");

  const good = await readFile(configFile, "utf8");
  await writeFile(configFile, "{ not json");
  await t.rejects(dockerd.reload(), /refused to reload/, "a broken file is reported");
  t.equal((await dockerd.info()).Labels.length, 2, "dockerd keeps its last good configuration");
  await writeFile(configFile, good);
});

t.test("swarm init works with no bridge and no iptables, and survives a restart", async (t) => {
  const dockerd = current();
  const nodeId = await initSwarm(dockerd);
  t.match(nodeId, /^[a-z0-9]{25}$/);
  const nodes = await dockerd.docker(["node", "ls", "--format", "{{.ID}} {{.ManagerStatus}}"]);
  t.same(nodes.stdout.split("\n"), [`${nodeId} Leader`]);
  t.equal(await initSwarm(dockerd), nodeId, "init on a swarm node returns its id");
  await dockerd.docker(["node", "update", "--label-add", "ebs-cache.ready=true", nodeId]);

  await dockerd.restart();
  const labels = await dockerd.docker(["node", "inspect", "--format", "{{json .Spec.Labels}}", "self"]);
  t.same(JSON.parse(labels.stdout), { "ebs-cache.ready": "true" });
  t.notOk((await hostLinkNames()).includes("docker_gwbridge"), "swarm's bridge is not on the host");

  // The swarm identity lives in <data-root>/swarm: another data-root is another (no) node.
  await setDaemonConfig({ "data-root": join(top, "data-b") });
  await dockerd.restart();
  t.equal((await dockerd.info()).Swarm.LocalNodeState, "inactive", "not in the swarm on a fresh data-root");
  await setDaemonConfig({ "data-root": join(top, "data-a") });
  await dockerd.restart();
  t.equal((await dockerd.info()).Swarm.NodeID, nodeId, "back in the swarm on the old one");

  await leaveSwarm(dockerd);
  t.equal((await dockerd.info()).Swarm.LocalNodeState, "inactive");
  await leaveSwarm(dockerd);
});

t.test("two private dockerds run side by side, each with its own swarm", async (t) => {
  const otherConfig = join(top, "other.json");
  const other = await startPrivateDockerd({ root: join(top, "other"), configFile: otherConfig });
  t.teardown(() => other.stop());
  t.equal((await other.info()).DockerRootDir, join(top, "other", "data"), "data-root defaults under the root");
  t.match(JSON.parse(await readFile(otherConfig, "utf8")), { "data-root": join(top, "other", "data") });
  const [a, b] = await Promise.all([initSwarm(current()), initSwarm(other)]);
  t.not(a, b);
  await Promise.all([leaveSwarm(current()), leaveSwarm(other)]);
});

t.test("a daemon.json dockerd refuses makes start fail with its reason", async (t) => {
  const brokenRoot = join(top, "broken");
  const brokenConfig = join(top, "broken.json");
  await writeFile(brokenConfig, JSON.stringify({ "data-root": join(top, "data-c"), "no-such-option": true }));
  await t.rejects(startPrivateDockerd({ root: brokenRoot, configFile: brokenConfig }), /exited \(1\).*no-such-option/s);
  t.same(await privateDockerdProcesses(brokenRoot), []);

  await writeFile(brokenConfig, JSON.stringify({ "data-root": "/var/lib/docker" }));
  await t.rejects(startPrivateDockerd({ root: brokenRoot, configFile: brokenConfig }), /host's \/var\/lib\/docker/);
});

t.test("stop ends running containers, containerd and dockerd", async (t) => {
  const dockerd = current();
  await dockerd.docker(["run", "-d", "--stop-timeout", "1", "--network", "none", "lab/hello:1", "sleep", "1000"]);
  t.ok((await privateDockerdProcesses(root)).length >= 4, "dockerd, containerd, a shim and the container");
  await dockerd.stop();
  t.same(await privateDockerdProcesses(root), []);
  t.equal(dockerd.pid, undefined);
  t.equal(await dockerd.isActive(), false);
  t.notOk(existsSync(join(root, "net.ns")), "the network namespace is gone");
});

t.test("after dockerd is killed, stop still removes containerd, shims and containers", async (t) => {
  const dockerd = current();
  await dockerd.start();
  const started = await dockerd.docker(["run", "-d", "--network", "none", "lab/hello:1", "sleep", "1000"]);
  const containerId = started.stdout;
  process.kill(dockerd.pid ?? 0, "SIGKILL");
  await new Promise((resolve) => setTimeout(resolve, 200));
  const orphans = await privateDockerdProcesses(root);
  t.ok(orphans.length >= 2, "the shim and the container outlive a killed dockerd");
  await dockerd.stop();
  t.same(await privateDockerdProcesses(root), []);
  const mounts = await readFile("/proc/self/mountinfo", "utf8");
  t.notOk(mounts.includes(top), "nothing stays mounted under the root");
  const cgroupDirs = (await readdir("/sys/fs/cgroup")).flatMap((h) => [
    join("/sys/fs/cgroup", "docker", containerId),
    join("/sys/fs/cgroup", h, "docker", containerId),
  ]);
  t.same(
    cgroupDirs.filter((dir) => existsSync(dir)),
    [],
    "the killed container's cgroups are removed",
  );
  // The next start finds a consistent state.
  await dockerd.start();
  t.equal((await dockerd.info()).DockerRootDir, join(top, "data-a"));
  await dockerd.stop();
});

t.test("the host's docker is untouched", async (t) => {
  for (const [path, existed] of hostBefore) t.equal(existsSync(path), existed, path);
  t.same(await hostLinkNames(), hostLinksBefore, "no link added to the host");
  const leftovers = await run("pgrep", ["-f", top], { check: false });
  t.equal(leftovers.stdout, "", "no process of the test is left");
});
