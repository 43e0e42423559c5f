/**
 * An image put into a lab registry (registry.ts) straight from a `docker save` tarball
 * (images.ts writeImageArchive), through the registry's HTTP API: no dockerd needed, so the
 * registry may listen wherever the puller is (the machine's loopback for `snapshot build`'s
 * dockerd). Schema 2 manifest, gzipped layers, as `docker push` makes them.
 */
import { createHash } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { AgentError } from "../../errors.ts";
import { run } from "../../exec.ts";

const MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json";
const CONFIG_V1 = "application/vnd.docker.container.image.v1+json";
const LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip";

const digestOf = (bytes: Buffer) => `sha256:${createHash("sha256").update(bytes).digest("hex")}`;

/**
 * Pushes the one image of `archive` to `http://<address>/v2/<repository>` as `tag`; returns the
 * manifest's digest (what `docker image inspect` lists in RepoDigests after a pull).
 */
export async function pushImageArchive(
  address: string,
  archive: string,
  repository: string,
  tag: string,
  workDir: string,
): Promise<string> {
  const dir = await mkdtemp(join(workDir, "push-"));
  try {
    await run("tar", ["--extract", "--file", archive, "--directory", dir]);
    const [image] = JSON.parse(await readFile(join(dir, "manifest.json"), "utf8")) as {
      Config: string;
      Layers: string[];
    }[];
    if (!image) throw new AgentError(`${archive} holds no image`, "write it with writeImageArchive");
    const base = `http://${address}/v2/${repository}`;
    const config = await readFile(join(dir, image.Config));
    const layers = await Promise.all(image.Layers.map(async (layer) => gzipSync(await readFile(join(dir, layer)))));
    for (const blob of [config, ...layers]) await putBlob(base, blob);
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: MANIFEST_V2,
        config: { mediaType: CONFIG_V1, size: config.length, digest: digestOf(config) },
        layers: layers.map((layer) => ({ mediaType: LAYER_GZIP, size: layer.length, digest: digestOf(layer) })),
      }),
    );
    const put = await fetch(`${base}/manifests/${tag}`, {
      method: "PUT",
      headers: { "content-type": MANIFEST_V2 },
      body: manifest,
    });
    await expectStatus(put, 201, `the manifest of ${repository}:${tag}`);
    return digestOf(manifest);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function putBlob(base: string, blob: Buffer): Promise<void> {
  const started = await fetch(`${base}/blobs/uploads/`, { method: "POST" });
  await expectStatus(started, 202, "a blob upload");
  const location = new URL(started.headers.get("location") ?? "", base);
  location.searchParams.set("digest", digestOf(blob));
  const done = await fetch(location, {
    method: "PUT",
    headers: { "content-type": "application/octet-stream" },
    body: blob,
  });
  await expectStatus(done, 201, `blob ${digestOf(blob)}`);
}

async function expectStatus(response: Response, status: number, what: string): Promise<void> {
  const text = await response.text();
  if (response.status !== status)
    throw new AgentError(`the lab registry answered ${response.status} to ${what}: ${text.slice(0, 300)}`, "");
}
