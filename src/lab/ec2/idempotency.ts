/**
 * ClientToken idempotency of CreateVolume, as EC2 documents it ("Ensuring idempotency in Amazon
 * EC2 API requests"): a request repeated with the same client token and the same parameters
 * makes nothing new and answers with what the first one made; the same token with other
 * parameters is `IdempotentParameterMismatch`. The SDK fills ClientToken itself (an
 * idempotency token) and keeps it across its retries, so an attempt that was applied but
 * answered 500 is retried without making a second volume.
 *
 * Tokens are kept in the model (so they survive a restart of the emulator) for the one
 * account the emulator has. EC2 promises to remember a token for at least 24 hours; the emulator
 * remembers it for exactly TOKEN_MEMORY_MS of its own clock after the first request (and at most
 * the newest MAX_TOKENS): a client that counts on a longer memory, or on a token being forgotten
 * sooner, is caught. A token whose volume was deleted since is still remembered: EC2 answers the
 * first request's volume again, gone or not, so a client must not repeat a token once the volume
 * it made is gone if it wants a new one.
 */
import { Ec2Error, invalidValue } from "./ec2-error.ts";
import type { ClientTokenRecord, Model } from "./model.ts";
import type { Params } from "./params.ts";

/** EC2's limit on a client token: up to 64 ASCII characters. */
const MAX_TOKEN_LENGTH = 64;
const MAX_TOKENS = 10_000;
/** How long (of the emulator's clock) a token is remembered after its first request: EC2's promised minimum. */
export const TOKEN_MEMORY_MS = 24 * 3600_000;

/** Parameters that are not part of what a token stands for. */
const NOT_FINGERPRINTED = new Set(["ClientToken", "Action", "Version", "DryRun"]);

/** The request's ClientToken, checked (undefined when not given or empty). */
export function clientToken(p: Params): string | undefined {
  const token = p.str("ClientToken");
  if (token === undefined || token === "") return undefined;
  if (token.length > MAX_TOKEN_LENGTH || !/^[\x20-\x7e]+$/.test(token)) {
    throw invalidValue("clientToken", token, `The client token must be 1 to ${MAX_TOKEN_LENGTH} ASCII characters.`);
  }
  return token;
}

/** The request's parameters in a canonical form, to tell a true repeat from a reuse of the token. */
export function fingerprint(p: Params): string {
  const entries = p.entries().filter(([name]) => !NOT_FINGERPRINTED.has(name));
  entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify(entries);
}

/**
 * The record of an earlier request with this token (within TOKEN_MEMORY_MS of `nowMs`), or
 * undefined for a new token, or one forgotten. Throws IdempotentParameterMismatch when the token
 * was used with other parameters.
 */
export function earlierRequest(
  model: Model,
  token: string,
  print: string,
  nowMs: number,
): ClientTokenRecord | undefined {
  const tokens = model.clientTokens ?? {};
  let known = Object.hasOwn(tokens, token) ? tokens[token] : undefined;
  if (known && !(nowMs - Date.parse(known.at) < TOKEN_MEMORY_MS)) {
    delete tokens[token];
    known = undefined;
  }
  if (known && known.fingerprint !== print) {
    throw new Ec2Error(
      "IdempotentParameterMismatch",
      `Client token '${token}' was already used for a request with different parameters.`,
    );
  }
  return known;
}

/** Remembers what a token made (dropping the oldest tokens beyond MAX_TOKENS). */
export function rememberToken(model: Model, token: string, record: ClientTokenRecord): void {
  const tokens = (model.clientTokens ??= {});
  tokens[token] = record;
  const names = Object.keys(tokens);
  if (names.length > MAX_TOKENS) {
    names.sort((a, b) => ((tokens[a]?.at ?? "") < (tokens[b]?.at ?? "") ? -1 : 1));
    for (const name of names.slice(0, names.length - MAX_TOKENS)) delete tokens[name];
  }
}
