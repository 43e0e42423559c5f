/**
 * Images and swarm for the lab's private dockerd, with no registry: an image is a busybox rootfs
 * (plus, for benchmarks, a payload of incompressible bytes) imported with `docker import`; the
 * swarm is a single manager listening on the dockerd's own loopback.
 */
import { createCipheriv, createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, mkdtemp, open, rename, rm, symlink, writeFile, copyFile, chmod } from "node:fs/promises";
import { dirname, join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { AgentError } from "../../errors.ts";
import { run } from "../../exec.ts";
import type { Logger } from "../../log.ts";
import type { PrivateDockerd } from "./dockerd.ts";

/** Debian's busybox-static: one self-contained binary, so the image needs no libc. */
export const BUSYBOX = "/bin/busybox";
const APPLETS = ["sh", "cat", "ls", "sleep", "echo"];
/** Payload files are at most this big, so a 2 GiB image is a few files, not one. */
const PAYLOAD_FILE_BYTES = 256 * 1024 * 1024;
const CHUNK_BYTES = 1024 * 1024;
/** tar's options for the same archive from the same files, whoever and whenever. */
const REPRODUCIBLE = ["--sort=name", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner"];

/** What the image helpers need of a dockerd. */
export type DockerClient = Pick<PrivateDockerd, "docker" | "info">;

/** What to build: the tag, where to stage it, and how big its payload is. */
export interface BuildImageOptions {
  /** Repository:tag to give the image, e.g. `lab/app:1`. */
  tag: string;
  /** Folder under which the temporary rootfs and tarball are written (and removed afterwards). */
  workDir: string;
  /** Bytes of incompressible data under /payload (default 0). */
  payloadBytes?: number;
  /**
   * Largest payload file (default 256 MiB): `/payload/blob-000.bin`, `blob-001.bin`, …; smaller files
   * make an image whose start reads some of its files, not a part of one.
   */
  payloadFileBytes?: number;
  /** Makes the payload (and so the layer) differ between images; defaults to the tag. */
  seed?: string;
  /** The image's CMD (default `/bin/sh`). */
  cmd?: string[];
  /** More files of the rootfs: path (relative to its root) to content. */
  files?: Record<string, string>;
  log?: Logger;
}

/**
 * Builds an image from a busybox rootfs and returns its id (`sha256:…`). The tarball is
 * reproducible (sorted, fixed mtime and owners): the same tag, seed and size give the same layer.
 */
export async function buildImage(docker: DockerClient, options: BuildImageOptions): Promise<string> {
  return withRootfsTarball(options, async (tarball) => {
    const imported = await docker.docker(
      ["import", "--change", `CMD ${JSON.stringify(options.cmd ?? ["/bin/sh"])}`, tarball, options.tag],
      {
        log: options.log,
        // A 2 GiB payload takes a while to unpack; this bounds a hung daemon, not a slow disk.
        timeoutMs: 30 * 60_000,
      },
    );
    const id = imported.stdout.trim();
    if (!/^sha256:[0-9a-f]{64}$/.test(id)) {
      throw new AgentError(`docker import printed ${JSON.stringify(id)}, not an image id`, "see the dockerd log");
    }
    const payloadBytes = options.payloadBytes ?? 0;
    options.log?.info("lab.image-built", "imported lab image", { tag: options.tag, id, payloadBytes });
    return id;
  });
}

/**
 * Writes the image as `docker save` writes one (manifest.json, the config, one layer) to
 * `archive`, with no dockerd: what `snapshot build --load` takes. Reproducible as buildImage's
 * layer is, and so is the image id (the config's digest): no time in it but the epoch.
 */
export async function writeImageArchive(archive: string, options: BuildImageOptions): Promise<string> {
  return withRootfsTarball(options, async (layer, temp) => {
    const diffId = await fileSha256(layer);
    const out = join(temp, "out");
    await mkdir(join(out, diffId), { recursive: true });
    await rename(layer, join(out, diffId, "layer.tar"));
    const epoch = "1970-01-01T00:00:00Z";
    const config = JSON.stringify({
      architecture: process.arch === "arm64" ? "arm64" : "amd64",
      os: "linux",
      created: epoch,
      config: { Cmd: options.cmd ?? ["/bin/sh"], Env: ["PATH=/bin"] },
      rootfs: { type: "layers", diff_ids: [`sha256:${diffId}`] },
      history: [{ created: epoch, created_by: "ebs-cache lab image" }],
    });
    const configId = createHash("sha256").update(config).digest("hex");
    await writeFile(join(out, `${configId}.json`), config);
    const manifest = [{ Config: `${configId}.json`, RepoTags: [options.tag], Layers: [`${diffId}/layer.tar`] }];
    await writeFile(join(out, "manifest.json"), JSON.stringify(manifest));
    await mkdir(dirname(archive), { recursive: true });
    await run("tar", ["--create", "--file", archive, "--directory", out, ...REPRODUCIBLE, "."], { log: options.log });
    return `sha256:${configId}`;
  });
}

/**
 * The image's rootfs as a reproducible tarball in a temporary folder under `workDir`, handed
 * to `use` (with the folder, for its own files); the folder is removed afterwards.
 */
async function withRootfsTarball<T>(
  options: BuildImageOptions,
  use: (tarball: string, temp: string) => Promise<T>,
): Promise<T> {
  const payloadBytes = options.payloadBytes ?? 0;
  if (!Number.isSafeInteger(payloadBytes) || payloadBytes < 0) {
    throw new AgentError(
      `payloadBytes must be a whole number of bytes, not ${payloadBytes}`,
      "fix the lab's image set",
    );
  }
  await assertStaticBusybox();
  await mkdir(options.workDir, { recursive: true });
  const temp = await mkdtemp(join(options.workDir, "image-"));
  try {
    const rootfs = join(temp, "rootfs");
    await writeRootfs(rootfs, options);
    const tarball = join(temp, "rootfs.tar");
    await run("tar", ["--create", "--file", tarball, "--directory", rootfs, ...REPRODUCIBLE, "."], {
      log: options.log,
    });
    return await use(tarball, temp);
  } finally {
    await rm(temp, { recursive: true, force: true });
  }
}

async function fileSha256(path: string): Promise<string> {
  const hash = createHash("sha256");
  await pipeline(createReadStream(path), hash);
  return hash.digest("hex");
}

/**
 * Makes the dockerd a single-node swarm manager and returns its node id (the existing one if it
 * already is). It listens on 127.0.0.1 inside the dockerd's own network namespace, so the
 * default port 2377 never clashes with the host or another private dockerd.
 */
export async function initSwarm(docker: DockerClient, options: { port?: number; log?: Logger } = {}): Promise<string> {
  const before = await docker.info();
  if (before.Swarm.LocalNodeState === "active") return before.Swarm.NodeID;
  const port = options.port ?? 2377;
  await docker.docker(["swarm", "init", "--advertise-addr", "127.0.0.1", "--listen-addr", `127.0.0.1:${port}`], {
    log: options.log,
  });
  const nodeId = (await docker.info()).Swarm.NodeID;
  if (!nodeId) throw new AgentError("docker swarm init succeeded but the node has no id", "see the dockerd log");
  return nodeId;
}

/** Leaves the swarm (forcing it, as the only manager must); nothing to do when not in one. */
export async function leaveSwarm(docker: DockerClient, options: { log?: Logger } = {}): Promise<void> {
  const info = await docker.info();
  if (info.Swarm.LocalNodeState === "inactive") return;
  await docker.docker(["swarm", "leave", "--force"], { log: options.log });
}

async function writeRootfs(rootfs: string, options: BuildImageOptions): Promise<void> {
  for (const dir of ["bin", "dev", "etc", "proc", "sys", "tmp", "root"]) {
    await mkdir(join(rootfs, dir), { recursive: true });
  }
  await chmod(join(rootfs, "tmp"), 0o1777);
  await copyFile(BUSYBOX, join(rootfs, "bin", "busybox"));
  await chmod(join(rootfs, "bin", "busybox"), 0o755);
  for (const applet of APPLETS) await symlink("busybox", join(rootfs, "bin", applet));
  const payloadBytes = options.payloadBytes ?? 0;
  const seed = options.seed ?? options.tag;
  // Not the tag: with the same seed, two tags then share one layer (the seed defaults to the tag).
  await writeFile(join(rootfs, "etc", "ebs-cache-lab-image"), `seed=${seed}\npayloadBytes=${payloadBytes}\n`);
  if (payloadBytes > 0)
    await writePayload(join(rootfs, "payload"), payloadBytes, seed, options.payloadFileBytes ?? PAYLOAD_FILE_BYTES);
  for (const [path, content] of Object.entries(options.files ?? {})) {
    await mkdir(dirname(join(rootfs, path)), { recursive: true });
    await writeFile(join(rootfs, path), content);
  }
}

/** Writes `bytes` of seeded pseudo-random data in files of at most `fileBytes`, streaming. */
async function writePayload(dir: string, bytes: number, seed: string, fileBytes: number): Promise<void> {
  if (!Number.isSafeInteger(fileBytes) || fileBytes <= 0)
    throw new AgentError(
      `payloadFileBytes must be a positive whole number, not ${fileBytes}`,
      "fix the lab's image set",
    );
  await mkdir(dir);
  for (let index = 0, left = bytes; left > 0; index += 1, left -= fileBytes) {
    const size = Math.min(left, fileBytes);
    const name = `blob-${String(index).padStart(3, "0")}.bin`;
    await pipeline(Readable.from(keystream(`${seed}/${index}`, size)), createWriteStream(join(dir, name)));
  }
}

/** AES-256-CTR over zeros: incompressible (so compression cannot shrink the cache) and fast. */
function* keystream(seed: string, size: number): Generator<Buffer> {
  const key = createHash("sha256").update(`ebs-cache-lab:${seed}`).digest();
  const cipher = createCipheriv("aes-256-ctr", key, Buffer.alloc(16));
  const zeros = Buffer.alloc(CHUNK_BYTES);
  for (let left = size; left > 0; left -= CHUNK_BYTES) {
    yield cipher.update(left >= CHUNK_BYTES ? zeros : zeros.subarray(0, left));
  }
}

/** A dynamically linked busybox would fail in the image with a baffling "no such file". */
async function assertStaticBusybox(): Promise<void> {
  const remediation = "install it: apt-get install -y busybox-static";
  let header: Buffer;
  try {
    const handle = await open(BUSYBOX, "r");
    try {
      header = Buffer.alloc(4096);
      await handle.read(header, 0, header.length, 0);
    } finally {
      await handle.close();
    }
  } catch {
    throw new AgentError(`${BUSYBOX} is missing`, remediation);
  }
  if (!hasNoInterpreter(header)) throw new AgentError(`${BUSYBOX} is not statically linked`, remediation);
}

/** True for a 64-bit little-endian ELF with no PT_INTERP program header (a static binary). */
function hasNoInterpreter(elf: Buffer): boolean {
  if (elf.readUInt32BE(0) !== 0x7f454c46 || elf[4] !== 2 || elf[5] !== 1) return false;
  const phoff = Number(elf.readBigUInt64LE(0x20));
  const phentsize = elf.readUInt16LE(0x36);
  const phnum = elf.readUInt16LE(0x38);
  for (let i = 0; i < phnum; i += 1) {
    const offset = phoff + i * phentsize;
    if (offset + 4 > elf.length) return false;
    const PT_INTERP = 3;
    if (elf.readUInt32LE(offset) === PT_INTERP) return false;
  }
  return true;
}
