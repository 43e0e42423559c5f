/**
 * Resource ids as EC2 mints them: a prefix and 17 lowercase hex digits. Only the prefix tells
 * what kind of resource an id names, which is how CreateTags finds the right table.
 */
import { randomBytes } from "node:crypto";

/** The account every emulated resource belongs to (DescribeSnapshots `OwnerId`, `self`). */
export const OWNER_ID = "123456789012";

/** The resource kinds the emulator keeps. */
export type ResourceKind = "volume" | "snapshot" | "instance" | "network-interface";

const PREFIX: Record<ResourceKind | "reservation", string> = {
  volume: "vol",
  snapshot: "snap",
  instance: "i",
  "network-interface": "eni",
  reservation: "r",
};

/** A fresh id such as `vol-0123456789abcdef0`. */
export function newId(kind: ResourceKind | "reservation"): string {
  return `${PREFIX[kind]}-${randomBytes(9).toString("hex").slice(0, 17)}`;
}

/** Which kind of resource an id names, by its prefix; undefined when no kind matches. */
export function kindOfId(id: string): ResourceKind | undefined {
  if (id.startsWith("vol-")) return "volume";
  if (id.startsWith("snap-")) return "snapshot";
  if (id.startsWith("i-")) return "instance";
  if (id.startsWith("eni-")) return "network-interface";
  return undefined;
}

// EC2 accepts both the old 8-digit and the current 17-digit forms; anything else is "Malformed",
// a different error from "NotFound" that clients (and the agent) must not confuse.
const WELL_FORMED: Record<"volume" | "snapshot", RegExp> = {
  volume: /^vol-(?:[0-9a-f]{8}|[0-9a-f]{17})$/,
  snapshot: /^snap-(?:[0-9a-f]{8}|[0-9a-f]{17})$/,
};

/** Whether a volume or snapshot id has the shape EC2 accepts. */
export function isWellFormed(kind: "volume" | "snapshot", id: string): boolean {
  return WELL_FORMED[kind].test(id);
}
