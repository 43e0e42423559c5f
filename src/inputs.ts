/**
 * Validation of values that came from outside the agent's control (EC2 tags, the autoscaler's
 * JSON tag, config): every such value passes here before it reaches a path, a label or a
 * command. The rules are deliberately narrower than what EC2 or docker would accept: a value
 * that fails here is reported and not used, never "cleaned up".
 */

import { MAX_TAG_VALUE } from "./tags.ts";

export type InputCheck = { ok: true; value: string } | { ok: false; problem: string };

export const MAX_POOL_NAME = 63;
export const MAX_RESOURCE_ID = 128;
export const MAX_IMAGE_REF = 255;
/**
 * A workspace id is stored as an EC2 tag value (MAX_TAG_VALUE) and published as a label value
 * (`<prefix>.workspace.<key>`, at most MAX_LABEL_VALUE in src/docker/labels.ts, which is longer):
 * the tag's limit is the one that binds.
 */
export const MAX_WORKSPACE_ID = MAX_TAG_VALUE;

const SHELL_METACHARACTERS = new Set(";|&$`<>(){}[]*?!~'\"\\");
const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/** Text safe for a one-line log: control and non-ASCII characters shown as \uXXXX. */
export function printable(text: string): string {
  return text.replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** Quotes a value for a problem sentence: escaped, non-ASCII shown as \uXXXX, long ones cut. */
export function quote(value: string): string {
  return printable(JSON.stringify(value.length > 64 ? `${value.slice(0, 61)}...` : value));
}

interface Rules {
  /** How the value is named in the sentence: "pool name", "user id". */
  what: string;
  max: number;
  slashAllowed: boolean;
}

/** The checks every kind of input shares; the first failing one is the problem. */
function checkCommon(value: unknown, rules: Rules): InputCheck {
  const { what, max } = rules;
  if (typeof value !== "string") {
    const got = Array.isArray(value)
      ? "an array"
      : typeof value === "object" && value !== null
        ? "an object"
        : String(value);
    return { ok: false, problem: `${what} must be a string, got ${got}` };
  }
  const fail = (reason: string): InputCheck => ({ ok: false, problem: `${what} ${quote(value)} ${reason}` });
  if (value === "") return { ok: false, problem: `${what} is empty` };
  if (value.length > max) return fail(`is ${value.length} characters long; at most ${max} are allowed`);
  const unprintable = [...value].find((c) => /[\s\p{Cc}]/u.test(c) || c.codePointAt(0)! > 0x7e);
  if (unprintable !== undefined) {
    const code = `U+${unprintable.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`;
    return fail(
      /\s/u.test(unprintable)
        ? `contains whitespace (${code})`
        : `contains a non-printable or non-ASCII character (${code})`,
    );
  }
  const meta = [...value].find((c) => SHELL_METACHARACTERS.has(c));
  if (meta !== undefined) return fail(`contains the shell metacharacter ${JSON.stringify(meta)}`);
  if (value.includes("..")) return fail(`contains ".." (it could climb out of a folder)`);
  if (!rules.slashAllowed && value.includes("/")) return fail(`contains "/"`);
  if (value.startsWith("-")) return fail(`starts with "-" (it could be read as a command-line option)`);
  return { ok: true, value };
}

function checkName(value: unknown, rules: Rules): InputCheck {
  const common = checkCommon(value, { ...rules, slashAllowed: false });
  if (!common.ok) return common;
  if (!NAME_PATTERN.test(common.value)) {
    return {
      ok: false,
      problem:
        `${rules.what} ${quote(common.value)} must start with a letter or digit and hold only letters, digits, ` +
        `".", "_" and "-"`,
    };
  }
  return common;
}

/**
 * A pool name (config `pool`, instance tag `ebs-cache:pool`): `^[A-Za-z0-9][A-Za-z0-9._-]*$`, at most 63 characters.
 */
export function validatePoolName(value: unknown): InputCheck {
  return checkName(value, { what: "pool name", max: MAX_POOL_NAME, slashAllowed: false });
}

/** A user / project / node id (integers and uuids pass), at most 128 characters. */
export function validateResourceId(value: unknown, what = "id"): InputCheck {
  return checkName(value, { what, max: MAX_RESOURCE_ID, slashAllowed: false });
}

/**
 * A workspace id (a value of osparc's node labels: `42`, `user_42`, a uuid, a product name): an
 * opaque string up to EC2's tag-value limit. It becomes a tag value, a filter value, a docker
 * label value and a log field, never a path or an argument; still, whitespace, control
 * characters, shell metacharacters (which also keeps EC2's filter wildcards `*` and `?` out),
 * `/`, `..` and a leading `-` are refused.
 */
export function validateWorkspaceId(value: unknown, what = "workspace id"): InputCheck {
  return checkCommon(value, { what, max: MAX_WORKSPACE_ID, slashAllowed: false });
}

/**
 * A value the agent stores as an EC2 tag (e.g. config `imageSet`, the volumes' `ebs-cache:image-set`):
 * printable ASCII without shell metacharacters, at most MAX_TAG_VALUE (EC2's limit) characters.
 * A label value the agent publishes is checked once more, by docker/labels.ts's validateLabelValue.
 */
export function validateTagValue(value: unknown, what = "tag value"): InputCheck {
  return checkCommon(value, { what, max: MAX_TAG_VALUE, slashAllowed: true });
}

// Docker's reference grammar (github.com/distribution/reference, regexp.go).
const ALPHANUMERIC = "[a-z0-9]+";
const SEPARATOR = "(?:[._]|__|[-]+)";
const PATH_COMPONENT = `${ALPHANUMERIC}(?:${SEPARATOR}${ALPHANUMERIC})*`;
const DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
const DOMAIN = `${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*(?::[0-9]+)?`;
const NAME = `(?:${DOMAIN}/)?${PATH_COMPONENT}(?:/${PATH_COMPONENT})*`;
const TAG = "[\\w][\\w.-]{0,127}";
const DIGEST = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}";
const REFERENCE = new RegExp(`^(${NAME})(?::${TAG})?(?:@(${DIGEST}))?$`);

/** An image reference per Docker's grammar: `[registry[:port]/]path[:tag][@digest]`, at most 255 characters. */
export function validateImageRef(value: unknown, what = "image reference"): InputCheck {
  const common = checkCommon(value, { what, max: MAX_IMAGE_REF, slashAllowed: true });
  if (!common.ok) return common;
  const ref = common.value;
  const match = REFERENCE.exec(ref);
  if (!match) {
    const path = ref
      .split("@")[0]!
      .replace(/^[^/]*[.:][^/]*\//, "")
      .replace(/:[^/]*$/, "");
    const hint = /[A-Z]/.test(path) ? " (repository names must be lowercase)" : "";
    return { ok: false, problem: `${what} ${quote(ref)} is not a valid Docker image reference${hint}` };
  }
  const digest = match[2];
  if (digest?.startsWith("sha256:") && !/^sha256:[0-9a-f]{64}$/.test(digest)) {
    return { ok: false, problem: `${what} ${quote(ref)} has a sha256 digest that is not 64 lowercase hex digits` };
  }
  return common;
}
