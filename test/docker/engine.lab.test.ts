import t from "tap";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { join } from "node:path";
import { createDaemonConfig } from "../../src/docker/daemon-json.ts";
import { DataRootError, prepareDataRoot } from "../../src/docker/data-root.ts";
import {
  createDockerEngine,
  detectImageStore,
  DockerApiError,
  toEngineInfo,
  type RawDockerInfo,
} from "../../src/docker/engine.ts";
import { chooseLabelMode, readinessLabels } from "../../src/docker/labels.ts";
import { engineMajorVersion } from "../../src/engine-version.ts";
import { installedDockerdVersion } from "../../src/docker/service.ts";
import {
  dockerdService,
  privateDockerdProcesses,
  startPrivateDockerd,
  type PrivateDockerd,
} from "../../src/lab/docker/dockerd.ts";
import { buildImage, initSwarm, leaveSwarm } from "../../src/lab/docker/images.ts";
import { assertDockerPrerequisites } from "../fixtures/lab/lab-prereq.ts";

assertDockerPrerequisites("test/docker/engine.lab.test.ts");

// Short: dockerd's sockets live under its root, and sun_path holds 108 bytes.
const top = await mkdtemp("/var/tmp/ebs-cache-lab-test-");
const root = join(top, "d");
const configFile = join(top, "daemon.json");
const dataA = join(top, "a");
const dataB = join(top, "b");
const PREFIX = "ebs-cache";
let dockerd: PrivateDockerd | undefined;

t.teardown(async () => {
  await dockerd?.stop();
  await rm(top, { recursive: true, force: true });
});

function current(): PrivateDockerd {
  if (!dockerd) throw new Error("dockerd did not start");
  return dockerd;
}

async function mountsUnder(dir: string): Promise<string[]> {
  const lines = (await readFile("/proc/self/mountinfo", "utf8")).split("\n");
  return lines.map((line) => line.split(" ")[4] ?? "").filter((mountPoint) => mountPoint.startsWith(`${dir}/`));
}

t.test("info() reports the data-root daemon.json gave dockerd", async (t) => {
  await createDaemonConfig({ path: configFile }).setDataRoot(dataA);
  dockerd = await startPrivateDockerd({ root, configFile });
  const engine = createDockerEngine({ host: dockerd.host });
  await engine.waitUntilReady(60_000);
  t.equal(await engine.ping(), true);
  const info = await engine.info();
  t.equal(info.dockerRootDir, dataA);
  t.equal(info.driver, "overlay2");
  t.equal(info.imageStore, "graphdriver");
  t.match(info.serverVersion, /^20\.10\./);
  t.same(info.swarm, { nodeId: "", controlAvailable: false, state: "inactive" });
  t.same(info.labels, []);
  t.equal(detectImageStore(await engine.rawInfo()), "graphdriver", "20.10 is a graphdriver engine");
  t.equal(engineMajorVersion(info.serverVersion), 20);
  t.equal(await installedDockerdVersion(), info.serverVersion, "the installed dockerd's version, read without the API");
});

t.test("images() lists repo:tag of every image, without <none>", async (t) => {
  const engine = createDockerEngine({ host: current().host });
  const workDir = join(top, "work");
  await buildImage(current(), { tag: "lab/engine:1", workDir });
  await buildImage(current(), { tag: "lab/engine:2", workDir });
  // Re-tagging lab/engine:1 onto another image leaves the first one dangling (<none>:<none>).
  await buildImage(current(), { tag: "lab/engine:1", workDir, seed: "another" });
  const dangling = await current().docker(["images", "--filter", "dangling=true", "--quiet"]);
  t.not(dangling.stdout.trim(), "", "there is a dangling image");
  t.same(await engine.images(), ["lab/engine:1", "lab/engine:2"]);
});

t.test("a data-root switch through DaemonConfig, a restart, and a rollback", async (t) => {
  const service = dockerdService(current());
  const engine = createDockerEngine({ host: current().host });
  const config = createDaemonConfig({ path: configFile });
  const before = await config.read();
  t.ok(before["deprecated-key-path"], "the lab's own key is in the file");

  await config.setDataRoot(dataB);
  await service.restart();
  await engine.waitUntilReady(60_000);
  t.equal((await engine.info()).dockerRootDir, dataB);
  t.same(await engine.images(), [], "a fresh data-root has no images");
  t.same(Object.keys(await config.read()), Object.keys(before), "other keys kept, in order");

  await config.restoreBackup();
  await service.restart();
  await engine.waitUntilReady(60_000);
  t.equal((await engine.info()).dockerRootDir, dataA, "back on the old root");
  t.same(await engine.images(), ["lab/engine:1", "lab/engine:2"]);
});

t.test("prepareDataRoot on a real data-root: containers and swarm go, images still run", async (t) => {
  const engine = createDockerEngine({ host: current().host });
  const service = dockerdService(current());
  await current().docker(["create", "--name", "created", "--network", "none", "lab/engine:2", "echo", "never"]);
  await current().docker([
    "run",
    "--name",
    "exited",
    "--network",
    "none",
    "lab/engine:2",
    "sh",
    "-c",
    "echo x > /tmp/x",
  ]);
  await current().docker([
    "run",
    "-d",
    "--stop-timeout",
    "1",
    "--name",
    "running",
    "--network",
    "none",
    "lab/engine:2",
    "sleep",
    "1000",
  ]);
  const nodeId = await initSwarm(current());
  t.ok(nodeId);

  await t.rejects(
    prepareDataRoot(dataA, { kind: "pool" }),
    DataRootError,
    "refused while docker runs containers on it",
  );

  const mountsDir = join(dataA, "image", "overlay2", "layerdb", "mounts");
  const containerIds = await readdir(mountsDir);
  t.equal(containerIds.length, 3);
  const rwLayers = await Promise.all(
    containerIds.map(async (id) => (await readFile(join(mountsDir, id, "mount-id"), "utf8")).trim()),
  );
  const imageLayersBefore = (await readdir(join(dataA, "overlay2"))).filter(
    (name) => name !== "l" && !rwLayers.some((layer) => name.startsWith(layer)),
  );

  await service.stop();
  t.same(await mountsUnder(dataA), [], "nothing mounted once docker stopped");
  const report = await prepareDataRoot(dataA, { kind: "pool" });
  t.ok(report.removed.includes("swarm"));
  t.same(await readdir(mountsDir), []);
  t.same(await readdir(join(dataA, "containers")), []);
  t.same(
    (await readdir(join(dataA, "overlay2"))).filter((name) => name !== "l").sort(),
    imageLayersBefore.sort(),
    "exactly the image layers are left",
  );

  await service.start();
  await engine.waitUntilReady(60_000);
  const info = await engine.info();
  t.equal(info.swarm.state, "inactive", "no swarm identity travelled");
  t.equal((await current().docker(["ps", "--all", "--quiet"])).stdout, "", "no container travelled");
  t.same(await engine.images(), ["lab/engine:1", "lab/engine:2"]);
  const ran = await current().docker(["run", "--rm", "--network", "none", "lab/engine:2", "echo", "still runs"]);
  t.equal(ran.stdout, "still runs");
});

t.test("engine labels: daemon.json labels + reload, without a restart", async (t) => {
  const engine = createDockerEngine({ host: current().host });
  const service = dockerdService(current());
  const pid = current().pid;
  const config = createDaemonConfig({ path: configFile });
  t.equal(chooseLabelMode("auto", await engine.info()), "engine", "not a manager: engine labels");

  await config.setEngineLabels("team", { "team.name": "science" });
  await config.setEngineLabels(
    PREFIX,
    readinessLabels(PREFIX, "warming", { "volume-id": "vol-0abc", pool: "sim4life" }),
  );
  await service.reload();
  t.same((await engine.info()).labels.sort(), [
    "ebs-cache.pool=sim4life",
    "ebs-cache.state=warming",
    "ebs-cache.volume-id=vol-0abc",
    "team.name=science",
  ]);

  await config.setEngineLabels(PREFIX, readinessLabels(PREFIX, "ready", { "volume-id": "vol-0abc" }));
  await service.reload();
  t.same((await engine.info()).labels.sort(), [
    "ebs-cache.state=ready",
    "ebs-cache.volume-id=vol-0abc",
    "team.name=science",
  ]);
  t.equal(current().pid, pid, "same dockerd process");
});

t.test("node labels through the manager's API", async (t) => {
  const engine = createDockerEngine({ host: current().host });
  const nodeId = await initSwarm(current());
  const info = await engine.info();
  t.equal(info.swarm.nodeId, nodeId);
  t.equal(info.swarm.controlAvailable, true);
  t.equal(chooseLabelMode("auto", info), "node");

  await engine.setNodeLabels(nodeId, { "ebs-cache.state": "warming", "ebs-cache.pool": "sim4life", team: "x" }, []);
  t.same(await engine.nodeLabels(nodeId), { "ebs-cache.state": "warming", "ebs-cache.pool": "sim4life", team: "x" });
  await engine.setNodeLabels(nodeId, { "ebs-cache.state": "ready" }, ["ebs-cache.pool", "not-there"]);
  t.same(await engine.nodeLabels(nodeId), { "ebs-cache.state": "ready", team: "x" });
  await engine.setNodeLabels(nodeId, { "ebs-cache.state": "ready" }, []);
  const inspected = await current().docker(["node", "inspect", "--format", "{{json .Spec.Labels}}", "self"]);
  t.same(JSON.parse(inspected.stdout), { "ebs-cache.state": "ready", team: "x" }, "the CLI sees the same");

  const missing = await engine.nodeLabels("nosuchnode0000000000000000").catch((e: unknown) => e);
  t.type(missing, DockerApiError);
  t.equal((missing as DockerApiError).status, 404);
  await t.rejects(engine.setNodeLabels(nodeId, { "bad=key": "x" }, []), /label key/);

  await leaveSwarm(current());
  const notManager = await engine.nodeLabels(nodeId).catch((e: unknown) => e);
  t.type(notManager, DockerApiError);
  t.equal((notManager as DockerApiError).status, 503);
  t.match((notManager as DockerApiError).remediation, /engine labels/);
});

t.test("a dockerd that does not answer", async (t) => {
  const engine = createDockerEngine({ host: `unix://${join(top, "none.sock")}` });
  t.equal(await engine.ping(), false);
  const error = await engine.info().catch((e: unknown) => e);
  t.type(error, DockerApiError);
  t.equal((error as DockerApiError).status, undefined);
  t.match((error as DockerApiError).remediation, /journalctl -u docker/);
  await t.rejects(engine.waitUntilReady(300), /did not answer \/_ping within 300 ms/);
  t.throws(() => createDockerEngine({ host: "tcp://127.0.0.1:2375" }), /unix:\/\//);
});

t.test("setNodeLabels retries once when the node changed meanwhile", async (t) => {
  const socketPath = join(top, "fake.sock");
  let version = 7;
  let conflicts = 0;
  const posts: string[] = [];
  let labels: Record<string, string> = { team: "x" };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const reply = (status: number, body: unknown) => {
        res.writeHead(status, { "Content-Type": "application/json" });
        res.end(JSON.stringify(body));
      };
      if (req.method === "GET" && req.url === "/nodes/n1") {
        return reply(200, {
          ID: "n1",
          Version: { Index: version },
          Spec: { Role: "manager", Availability: "active", Labels: labels },
        });
      }
      if (req.method === "POST" && req.url?.startsWith("/nodes/n1/update?version=")) {
        posts.push(req.url);
        if (conflicts > 0) {
          conflicts -= 1;
          version += 1; // someone else updated the node
          return reply(500, { message: "rpc error: code = Unknown desc = update out of sequence" });
        }
        const spec = JSON.parse(Buffer.concat(chunks).toString("utf8")) as {
          Labels: Record<string, string>;
          Role: string;
        };
        t.equal(spec.Role, "manager", "the rest of the spec is sent back");
        labels = spec.Labels;
        version += 1;
        return reply(200, {});
      }
      if (req.url === "/images/json") {
        return reply(200, [
          { RepoTags: ["a:1", "b:2"] },
          { RepoTags: ["<none>:<none>"] },
          { RepoTags: null },
          { RepoTags: ["a:1"] },
        ]);
      }
      reply(404, { message: "page not found" });
    });
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const engine = createDockerEngine({ host: `unix://${socketPath}` });

  conflicts = 1;
  await engine.setNodeLabels("n1", { "ebs-cache.state": "ready" }, []);
  t.same(posts, ["/nodes/n1/update?version=7", "/nodes/n1/update?version=8"], "read again, sent with the new version");
  t.same(labels, { team: "x", "ebs-cache.state": "ready" });

  posts.length = 0;
  conflicts = 5;
  const error = await engine.setNodeLabels("n1", { "ebs-cache.state": "degraded" }, []).catch((e: unknown) => e);
  t.type(error, DockerApiError);
  t.equal((error as DockerApiError).status, 500);
  t.match((error as DockerApiError).apiMessage, /update out of sequence/);
  t.equal(posts.length, 2, "one retry only");

  t.same(await engine.images(), ["a:1", "b:2"]);
  await t.rejects(engine.nodeLabels("../images/json"), /not a swarm node id/);
});

t.test("image store detection on recorded docker 29 answers", async (t) => {
  const samples = JSON.parse(
    await readFile(join(import.meta.dirname, "..", "fixtures", "data", "docker-info-29.json"), "utf8"),
  ) as Record<string, RawDockerInfo>;
  t.equal(detectImageStore(samples.containerd ?? {}), "containerd");
  t.equal(detectImageStore(samples.graphdriver ?? {}), "graphdriver");
  t.equal(toEngineInfo(samples.containerd ?? {}).imageStore, "containerd");
  t.equal(engineMajorVersion(samples.containerd?.ServerVersion), 29);
  t.same(toEngineInfo(samples.graphdriver ?? {}).swarm, {
    nodeId: "x2bq1d1v0c8m4n3r7s5t9u6w",
    controlAvailable: false,
    state: "active",
  });
  t.equal(
    detectImageStore({ Driver: "stargz", DriverStatus: [["driver-type", "io.containerd.snapshotter.v1"]] }),
    "containerd",
  );
  t.equal(detectImageStore({ Driver: "overlayfs", DriverStatus: null }), "containerd");
  t.equal(detectImageStore({ Driver: "overlay2", DriverStatus: [["Backing Filesystem", "extfs"]] }), "graphdriver");
});

t.test("every dockerd of the test is stopped and nothing stays mounted", async (t) => {
  await current().stop();
  t.same(await privateDockerdProcesses(root), []);
  t.same(await mountsUnder(top), []);
});
