/**
 * The time of a request's SigV4 signature, judged against the emulator's clock as EC2 judges it
 * against its own: a signature dated more than 5 minutes before or after EC2's time is refused
 * with `RequestExpired` (HTTP 400), before the action is looked at. The IAM guide's SigV4 page
 * gives the 5 minutes ("a request must reach AWS within five minutes of the time stamp in the
 * request"); EC2's list of common errors says 15 for RequestExpired: the stricter is modelled.
 * The answer carries the emulator's `Date` header (server.ts), from which the AWS SDK corrects the
 * time it signs with and retries (RequestExpired is one of its clock-skew codes); the aws CLI
 * (botocore) corrects nothing and fails, as it does against EC2 from a host whose clock is off.
 *
 * Only the signature's time is checked (the emulator checks no signature itself): `X-Amz-Date`
 * (header, or query parameter of a presigned request). A request without one (a hand-made GET)
 * is not judged.
 */
import { Ec2Error } from "./ec2-error.ts";

/** How far a signature's time may be off the emulator's clock. */
export const SIGNATURE_SKEW_MS = 5 * 60_000;

/** `20260301T101500Z` (SigV4's basic ISO 8601) as ms since the epoch; NaN when it is not one. */
export function parseAmzDate(text: string): number {
  const m = /^(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z$/.exec(text);
  if (!m) return NaN;
  const [, y, mo, d, h, mi, s] = m.map(Number) as [number, number, number, number, number, number, number];
  return Date.UTC(y, mo - 1, d, h, mi, s);
}

/**
 * The refusal EC2 gives a request signed at `amzDate` when its clock says `nowMs`; undefined when
 * the time is within the window (or the request carries none).
 */
export function signatureTimeRefusal(amzDate: string | undefined, nowMs: number): Ec2Error | undefined {
  if (amzDate === undefined || amzDate === "") return undefined;
  const signed = parseAmzDate(amzDate);
  if (Number.isNaN(signed)) {
    return new Ec2Error(
      "IncompleteSignature",
      `X-Amz-Date ${JSON.stringify(amzDate)} is not in the form 20260301T101500Z`,
    );
  }
  if (Math.abs(nowMs - signed) <= SIGNATURE_SKEW_MS) return undefined;
  return new Ec2Error(
    "RequestExpired",
    `Request has expired. Signature date ${amzDate} is more than 5 minutes from the service's time ` +
      `${new Date(nowMs).toISOString()}.`,
  );
}
