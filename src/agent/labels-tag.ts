/**
 * osparc's node-labels instance tag (`io.simcore.autoscaling.ec2_instance.docker_node_labels`,
 * config `workspace.labelsTag`), read as its autoscaler writes it: the JSON text in the single
 * tag when it fits in 256 characters, otherwise cut into 256-character chunks stored as
 * `<key>_0`, `<key>_1`, … (osparc's `dump_as_ec2_tags` / `load_from_ec2_tags`; a key belongs to
 * the tag when it matches `^<key>(_\d+)?$`). Pure.
 *
 * The tag is the autoscaler's, not the agent's: whatever is wrong with it is reported and the
 * boot goes on without it (the pool), never refused.
 */
import { printable, quote } from "../inputs.ts";
import { isNumberSource, objectMembers } from "./json-members.ts";

/** EC2's limit on a tag value, the size of osparc's chunks. */
export const LABELS_CHUNK_SIZE = 256;

export type LabelsTagRead =
  | { found: false }
  | { found: true; ok: true; labels: Readonly<Record<string, unknown>>; form: "single" | "chunked"; chunks: number }
  | { found: true; ok: false; problem: string };

/** The tags of the labels tag: the single one and the chunks by index (null for a chunk key that is no index). */
function tagParts(tags: Readonly<Record<string, string>>, key: string) {
  let single: string | undefined;
  const chunks = new Map<number, string>();
  const oddKeys: string[] = [];
  for (const [name, value] of Object.entries(tags)) {
    if (name === key) single = value;
    else if (name.startsWith(`${key}_`) && /^\d+$/.test(name.slice(key.length + 1))) {
      const digits = name.slice(key.length + 1);
      // `_01` beside `_1` would make two chunks of one index: only the canonical spelling counts.
      if (digits !== String(Number(digits))) oddKeys.push(name);
      else chunks.set(Number(digits), value);
    }
  }
  return { single, chunks, oddKeys };
}

/** A chunked JSON tag (osparc's `dump_as_ec2_tags` form) read and parsed, before its shape is checked. */
export type ChunkedJsonTagRead =
  | { found: false }
  | { found: true; ok: true; value: unknown; text: string; form: "single" | "chunked"; chunks: number }
  | { found: true; ok: false; problem: string };

/**
 * Reads a tag osparc writes with `dump_as_ec2_tags` (the labels tag, `pre_pulled_images`): the
 * single tag or its chunks joined in index order, parsed as JSON. Absent (neither form):
 * `found: false`. Both forms at once, a missing chunk, JSON that does not parse: a problem (one
 * sentence naming the tag).
 */
export function readChunkedJsonTag(tags: Readonly<Record<string, string>>, key: string): ChunkedJsonTagRead {
  const { single, chunks, oddKeys } = tagParts(tags, key);
  if (single === undefined && chunks.size === 0 && oddKeys.length === 0) return { found: false };
  const where = `instance tag ${quote(key)}`;
  const bad = (problem: string): ChunkedJsonTagRead => ({ found: true, ok: false, problem: `${where}: ${problem}` });
  if (oddKeys.length > 0) return bad(`chunk key ${quote(oddKeys[0]!)} is not numbered 0, 1, 2, ... (leading zero)`);
  // The autoscaler writes one form; both at once means a write or a delete half done: which one
  // is current cannot be told, and a wrong guess could hand this node another user's workspace.
  if (single !== undefined && chunks.size > 0)
    return bad(`present both whole and in ${chunks.size} chunk(s) (_0, _1, ...): cannot tell which is current`);

  let text: string;
  if (single !== undefined) text = single;
  else {
    const missing = [...Array(Math.max(...chunks.keys()) + 1).keys()].filter((index) => !chunks.has(index));
    if (missing.length > 0) {
      return bad(
        `chunk ${missing.map((i) => `_${i}`).join(", ")} missing (found ${[...chunks.keys()]
          .sort((a, b) => a - b)
          .map((i) => `_${i}`)
          .join(", ")})`,
      );
    }
    text = [...chunks.keys()]
      .sort((a, b) => a - b)
      .map((index) => chunks.get(index)!)
      .join("");
  }

  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return bad(`not valid JSON (${printable((error as Error).message).slice(0, 120)})`);
  }
  const form = single !== undefined ? "single" : "chunked";
  return { found: true, ok: true, value, text, form, chunks: form === "single" ? 1 : chunks.size };
}

/**
 * Reads the labels tag from the instance's tags. Absent (neither form): `found: false`. Both
 * forms at once, a missing chunk, JSON that does not parse or is not an object, a key written
 * twice: a problem (one sentence); nothing of the tag may then be used.
 *
 * Ids are text: a number is taken as its source text (`42` reads as `"42"`, the text a template
 * renders; `4.2e1` stays `4.2e1`; two integers beyond 2^53 stay two), never through a double.
 * Other values as JSON gives them.
 */
export function readLabelsTag(tags: Readonly<Record<string, string>>, key: string): LabelsTagRead {
  const read = readChunkedJsonTag(tags, key);
  if (!read.found || !read.ok) return read;
  const labels = read.value;
  const bad = (problem: string): LabelsTagRead => ({
    found: true,
    ok: false,
    problem: `instance tag ${quote(key)}: ${problem}`,
  });
  if (typeof labels !== "object" || labels === null || Array.isArray(labels)) {
    const got = Array.isArray(labels) ? "an array" : typeof labels === "string" ? quote(labels) : String(labels);
    return bad(`must hold a JSON object, got ${got}`);
  }
  const members = objectMembers(read.text);
  const seen = new Set<string>();
  for (const { key: name } of members) {
    // JSON.parse keeps the last of two equal keys, osparc's reader too: which one was meant cannot be told.
    if (seen.has(name)) return bad(`key ${quote(name)} written twice: cannot tell which value is meant`);
    seen.add(name);
  }
  // fromEntries defines own properties: a key `__proto__` stays a label, not a prototype.
  const text = Object.fromEntries(
    members.map(({ key: name, source }) => [name, isNumberSource(source) ? source : (JSON.parse(source) as unknown)]),
  );
  return { found: true, ok: true, labels: text, form: read.form, chunks: read.chunks };
}

/**
 * The instance tags osparc's autoscaler writes for `labels` (its `dump_as_ec2_tags`): one tag
 * when the JSON text fits in 256 characters, chunks `<key>_0`, `<key>_1`, … otherwise. For the
 * lab's autoscaler actor and the tests; `pre_pulled_images` is written the same way, from a list.
 */
export function labelsTagAsOsparcWrites(
  key: string,
  labels: Readonly<Record<string, unknown>> | readonly unknown[],
): Record<string, string> {
  const text = JSON.stringify(labels);
  if (text.length <= LABELS_CHUNK_SIZE) return { [key]: text };
  const tags: Record<string, string> = {};
  for (let index = 0; index * LABELS_CHUNK_SIZE < text.length; index++) {
    tags[`${key}_${index}`] = text.slice(index * LABELS_CHUNK_SIZE, (index + 1) * LABELS_CHUNK_SIZE);
  }
  return tags;
}
