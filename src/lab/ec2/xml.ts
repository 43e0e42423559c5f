/**
 * XML for the EC2 Query protocol: a response is `<{Action}Response xmlns=…>` holding a
 * `<requestId>` and the result's members; lists are `<item>` children; errors use the
 * `<Response><Errors><Error>` shape both the SDK and botocore parse into named exceptions.
 */
import type { Ec2Error } from "./ec2-error.ts";

/** The namespace of API version 2016-11-15 (the one both clients speak). */
export const EC2_XMLNS = "http://ec2.amazonaws.com/doc/2016-11-15/";

/**
 * A value to render: scalars become text, arrays become `<item>` lists, objects become child
 * elements in key order. `undefined` and `null` members are left out, as EC2 omits unset fields.
 */
export type XmlValue = string | number | boolean | null | undefined | XmlValue[] | XmlObject;
/** Child elements by name. */
export interface XmlObject {
  [element: string]: XmlValue;
}

/** Escapes text for element content and attribute values. */
export function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (c) =>
    c === "&" ? "&amp;" : c === "<" ? "&lt;" : c === ">" ? "&gt;" : c === '"' ? "&quot;" : "&apos;",
  );
}

function renderValue(value: XmlValue): string {
  if (value === null || value === undefined) return "";
  if (Array.isArray(value)) return value.map((item) => renderElement("item", item)).join("");
  if (typeof value === "object") return renderMembers(value);
  return escapeXml(String(value));
}

function renderElement(name: string, value: XmlValue): string {
  if (value === null || value === undefined) return "";
  const inner = renderValue(value);
  return inner === "" ? `<${name}/>` : `<${name}>${inner}</${name}>`;
}

function renderMembers(members: XmlObject): string {
  return Object.entries(members)
    .map(([name, value]) => renderElement(name, value))
    .join("");
}

/** The body of a successful response to `action`. */
export function renderResponse(action: string, requestId: string, result: XmlObject): string {
  return (
    `<?xml version="1.0" encoding="UTF-8"?>\n` +
    `<${action}Response xmlns="${EC2_XMLNS}"><requestId>${escapeXml(requestId)}</requestId>` +
    `${renderMembers(result)}</${action}Response>`
  );
}

/** The body of an error response. */
export function renderError(error: Ec2Error, requestId: string): string {
  return (
    `<?xml version="1.0" encoding="UTF-8"?>\n` +
    `<Response><Errors><Error><Code>${escapeXml(error.code)}</Code>` +
    `<Message>${escapeXml(error.message)}</Message></Error></Errors>` +
    `<RequestID>${escapeXml(requestId)}</RequestID></Response>`
  );
}
