/**
 * The golden build's record of what an image reads when it starts, as pure decisions: the
 * files a traced run opened or executed (strace's log, src/host/record-reads.ts), in first-read
 * order, each once, then placed in the need list (src/agent/prewarm/need.ts) beside the other
 * images' entries. See docs/prewarm.md.
 */
import { AgentError } from "../errors.ts";
import { asListed } from "../image-ref.ts";
import {
  isVolumeFilePath,
  MAX_READ_LIST_FILES,
  parseReadList,
  ReadListError,
  readListText,
  type ReadList,
} from "../read-list.ts";

/** One line of `strace -f -y -e status=successful`: an opened fd (`= 3</path>`), an execve, a chroot. */
const OPENED = /^\d+\s+(?:open|openat|openat2)\(.*\)\s+=\s+\d+<(.*)>$/;
const EXECVE = /^\d+\s+execve\("((?:[^"\\]|\\.)*)",.*\)\s+=\s+0$/;
const CHROOT = /^\d+\s+chroot\("((?:[^"\\]|\\.)*)"\)\s+=\s+0$/;

/**
 * Reads strace's log (`-f -y -qq -e trace=open,openat,openat2,execve,chroot -e status=successful`)
 * of a run chrooted into `root`: the opens whose resolved fd path lies below `root` (the host's
 * own opens, before the chroot, do not), and the execs after the first chroot (the host's tools
 * run before it). Both in the order they happened, in one list (`kind` says which).
 */
export function parseTrace(log: string, root: string): Array<{ kind: "open" | "exec"; path: string }> {
  const prefix = root.endsWith("/") ? root : `${root}/`;
  const out: Array<{ kind: "open" | "exec"; path: string }> = [];
  let chrooted = false;
  for (const line of log.split("\n")) {
    const opened = OPENED.exec(line);
    if (opened) {
      // A write-only open reads nothing of the file (a log the image appends to, an output it truncates).
      if (/\bO_WRONLY\b/.test(line)) continue;
      const path = unescape(opened[1]!);
      if (path?.startsWith(prefix)) out.push({ kind: "open", path: path.slice(prefix.length) });
      continue;
    }
    const chroot = CHROOT.exec(line);
    if (chroot) {
      chrooted = true;
      continue;
    }
    const exec = EXECVE.exec(line);
    if (exec && chrooted) {
      const path = unescape(exec[1]!);
      if (path?.startsWith("/")) out.push({ kind: "exec", path: path.slice(1) });
    }
  }
  return out;
}

/** strace's C-style escapes (`\"`, `\\`, `\n`, `\x41`, `\101`); undefined for one it does not know. */
function unescape(text: string): string | undefined {
  let bad = false;
  const out = text.replace(/\\(x[0-9a-fA-F]{2}|[0-7]{1,3}|.)/g, (_, code: string) => {
    if (code[0] === "x") return String.fromCharCode(parseInt(code.slice(1), 16));
    if (/^[0-7]/.test(code)) return String.fromCharCode(parseInt(code, 8));
    const simple: Record<string, string> = { '"': '"', "\\": "\\", n: "\n", t: "\t", r: "\r" };
    if (simple[code] === undefined) bad = true;
    return simple[code] ?? "";
  });
  return bad ? undefined : out;
}

/**
 * The image's files in first-read order, each once: every path the run touched mapped by
 * `layerFile` (root-relative path to a data-root-relative layer file, or undefined for one no
 * layer holds: a file the run wrote, /proc, /dev) and kept the first time it appears.
 */
export function firstReads(
  touched: ReadonlyArray<{ path: string }>,
  layerFile: (path: string) => string | undefined,
): string[] {
  const seen = new Set<string>();
  const files: string[] = [];
  for (const { path } of touched) {
    const file = layerFile(path);
    if (file === undefined || seen.has(file)) continue;
    seen.add(file);
    files.push(file);
    if (files.length >= MAX_READ_LIST_FILES) break;
  }
  return files;
}

/** The list with `image`'s entry replaced (or added last): a rebuild of one image keeps the others'. */
export function withImageReads(list: ReadList | undefined, image: string, files: string[]): ReadList {
  const others = (list?.images ?? []).filter((entry) => asListed(entry.image) !== asListed(image));
  return { images: [...others, { image, files }] };
}

/**
 * The list's text with `image`'s entry set to `files` (withImageReads), checked as the boot will
 * read it: a file the boot refuses (a control character in its name, a path past the bound) is
 * left out and counted in `dropped`; a list the boot would still refuse (an image reference it
 * does not accept, past its size or file count) throws, since the boot would then use none of it,
 * the other images' entries included.
 */
export function needListText(
  list: ReadList | undefined,
  image: string,
  files: readonly string[],
): { text: string; dropped: number } {
  const kept = files.filter((file) => isVolumeFilePath(file));
  const text = readListText(withImageReads(list, image, kept));
  try {
    parseReadList(text);
  } catch (error) {
    if (!(error instanceof ReadListError)) throw error;
    throw new AgentError(
      `${image}'s reads are not stored: with them, ${error.message}, and the boot would use none of the list`,
      "name the image by a valid Docker reference, or record fewer images (or fewer --seconds) into one volume",
    );
  }
  return { text, dropped: files.length - kept.length };
}
