/**
 * A disk image read as EBS blocks: which 512 KiB blocks hold data, and their SHA-256. Read
 * only. Node has no SEEK_DATA, so the whole image is read: the holes of a sparse image cost no
 * disk I/O (the kernel hands back zeros), and a block of zeros, hole or not, needs no put on a
 * fresh snapshot anyway (EBS reads an unwritten block as zeros).
 */
import { createHash } from "node:crypto";
import { open } from "node:fs/promises";

export interface ImageScan {
  bytes: number;
  /** Index → base64 SHA-256, for the blocks holding data. */
  blocks: Map<number, string>;
}

export function sha256(data: Uint8Array): Buffer {
  return createHash("sha256").update(data).digest();
}

/** The base64 SHA-256 of a block of zeros of `blockSize` bytes. */
export function zeroBlockHash(blockSize: number): string {
  return sha256(Buffer.alloc(blockSize)).toString("base64");
}

/** Reads `path` block by block (a short last block counts as padded with zeros, as EBS pads it). */
export async function scanImage(
  path: string,
  blockSize: number,
  onProgress?: (bytesRead: number, bytes: number) => void,
): Promise<ImageScan> {
  const file = await open(path, "r");
  try {
    const { size } = await file.stat();
    const buffer = Buffer.alloc(blockSize);
    const blocks = new Map<number, string>();
    for (let index = 0; index * blockSize < size; index += 1) {
      buffer.fill(0);
      await readFully(file, buffer, index * blockSize);
      if (!isZero(buffer)) blocks.set(index, sha256(buffer).toString("base64"));
      if (index % 2048 === 0) onProgress?.(index * blockSize, size);
    }
    return { bytes: size, blocks };
  } finally {
    await file.close();
  }
}

/** One block of the image (zero-padded past its end). */
export async function readImageBlock(path: string, index: number, blockSize: number): Promise<Buffer> {
  const file = await open(path, "r");
  try {
    const buffer = Buffer.alloc(blockSize);
    await readFully(file, buffer, index * blockSize);
    return buffer;
  } finally {
    await file.close();
  }
}

async function readFully(file: Awaited<ReturnType<typeof open>>, buffer: Buffer, position: number): Promise<void> {
  let offset = 0;
  while (offset < buffer.length) {
    const { bytesRead } = await file.read(buffer, offset, buffer.length - offset, position + offset);
    if (bytesRead === 0) return; // Past the end: the rest stays zeros.
    offset += bytesRead;
  }
}

const ZEROS = Buffer.alloc(64 * 1024);

function isZero(buffer: Buffer): boolean {
  for (let offset = 0; offset < buffer.length; offset += ZEROS.length) {
    const end = Math.min(buffer.length, offset + ZEROS.length);
    if (!buffer.subarray(offset, end).equals(ZEROS.subarray(0, end - offset))) return false;
  }
  return true;
}
