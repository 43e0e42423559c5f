/**
 * ClientToken idempotency of CreateVolume, as EC2 documents it ("Ensuring idempotency in Amazon
 * EC2 API requests"): a request repeated with the same client token and the same parameters
 * makes nothing new and answers with what the first one made; the same token with other
 * parameters is `IdempotentParameterMismatch`. The SDK fills ClientToken itself (an
 * idempotency token) and keeps it across its retries, so an attempt that was applied but
 * answered 500 is retried without making a second volume.
 *
 * Tokens are kept in the model (so they survive a restart of the emulator) for the one
 * account the emulator has; EC2 keeps them for a limited time, here the newest MAX_TOKENS.
 */
import { Ec2Error, invalidValue } from "./ec2-error.ts";
import type { ClientTokenRecord, Model } from "./model.ts";
import type { Params } from "./params.ts";

/** EC2's limit on a client token: up to 64 ASCII characters. */
const MAX_TOKEN_LENGTH = 64;
const MAX_TOKENS = 10_000;

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
 * The record of an earlier request with this token, or undefined for a new token. Throws
 * IdempotentParameterMismatch when the token was used with other parameters.
 */
export function earlierRequest(model: Model, token: string, print: string): ClientTokenRecord | undefined {
  const tokens = model.clientTokens ?? {};
  const known = Object.hasOwn(tokens, token) ? tokens[token] : undefined;
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
