/**
 * The members of a JSON object, each value kept as its source text. JSON.parse turns every
 * number into a double (two integers beyond 2^53 become one) and keeps only the last of two
 * equal keys; osparc's ids are text, so the labels tag is read member by member instead. Pure.
 *
 * Strict by construction: the text must first pass JSON.parse (RFC 8259 grammar, as V8 applies
 * it), so this scanner only cuts an object known to be valid at its top-level commas; anything it
 * does not expect is an error, never a guess.
 */

export interface JsonMember {
  /** The key, decoded (`"user\u002did"` is `user-id`). */
  key: string;
  /** The value's text as written, without the whitespace around it. */
  source: string;
}

/** The top-level members of `text`, in order, duplicates included. Throws when `text` is not a JSON object. */
export function objectMembers(text: string): JsonMember[] {
  const parsed: unknown = JSON.parse(text);
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    throw new SyntaxError("not a JSON object");
  const members: JsonMember[] = [];
  let at = skipSpace(text, 0);
  expect(text, at, "{");
  at = skipSpace(text, at + 1);
  if (text[at] === "}") return members;
  for (;;) {
    const keyEnd = stringEnd(text, at);
    const key = JSON.parse(text.slice(at, keyEnd)) as string;
    at = skipSpace(text, keyEnd);
    expect(text, at, ":");
    const start = skipSpace(text, at + 1);
    const end = valueEnd(text, start);
    members.push({ key, source: text.slice(start, end) });
    at = skipSpace(text, end);
    if (text[at] === "}") return members;
    expect(text, at, ",");
    at = skipSpace(text, at + 1);
  }
}

/** Whether a member's source is a JSON number (`-`, or a digit, starts one and nothing else). */
export function isNumberSource(source: string): boolean {
  return /^-?\d/.test(source);
}

function expect(text: string, at: number, char: string): void {
  if (text[at] !== char) throw new SyntaxError(`expected ${char} at ${at}`);
}

/** JSON's whitespace: space, tab, line feed, carriage return. */
function skipSpace(text: string, at: number): number {
  while (at < text.length && " \t\n\r".includes(text[at]!)) at++;
  return at;
}

/** The index just past the string starting at `at` (its opening quote). */
function stringEnd(text: string, at: number): number {
  expect(text, at, '"');
  for (let i = at + 1; i < text.length; i++) {
    if (text[i] === "\\") i++;
    else if (text[i] === '"') return i + 1;
  }
  throw new SyntaxError("unterminated string");
}

/**
 * The index just past the value starting at `at`: a string, an object or array (nesting counted, strings skipped), or a
 * literal/number.
 */
function valueEnd(text: string, at: number): number {
  const first = text[at];
  if (first === '"') return stringEnd(text, at);
  if (first === "{" || first === "[") {
    let depth = 0;
    for (let i = at; i < text.length; i++) {
      const c = text[i]!;
      if (c === '"') i = stringEnd(text, i) - 1;
      else if (c === "{" || c === "[") depth++;
      else if (c === "}" || c === "]") {
        depth--;
        if (depth === 0) return i + 1;
      }
    }
    throw new SyntaxError("unterminated value");
  }
  let i = at;
  while (i < text.length && !", \t\n\r}]".includes(text[i]!)) i++;
  if (i === at) throw new SyntaxError(`no value at ${at}`);
  return i;
}
