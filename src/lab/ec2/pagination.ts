/**
 * `MaxResults` / `NextToken` as the Describe* actions use them. Items are listed in creation
 * order and the token names the last item handed out (by its sequence number), so a page
 * boundary stays stable while other processes create or delete resources between pages.
 */
import { Ec2Error } from "./ec2-error.ts";
import type { Params } from "./params.ts";

/**
 * `MaxResults` of one action: below `min` is InvalidParameterValue; above `max` is accepted
 * and capped, as the API reference says of DescribeVolumes ("between 5 and 500; if MaxResults
 * is given a value larger than 500, only 500 items are returned"), DescribeSnapshots and
 * DescribeVolumeStatus (the same with 1,000). The aws CLI relies on it: its describe-volumes
 * asks for 1000 per page by default.
 */
export interface PageLimits {
  min: number;
  /** The most items of one page (a larger MaxResults gives this many). */
  max: number;
  /** The list-of-ids parameter that cannot be combined with MaxResults, e.g. `VolumeId`. */
  idsParam?: string;
  /** How EC2 names that parameter in the error message, e.g. `volumeSet`. */
  idsName?: string;
}

/** One page and, when more items follow, the token for the next. */
export interface Page<T> {
  items: T[];
  nextToken: string | undefined;
}

const TOKEN_PREFIX = "ec2lab1:";

function encodeToken(seq: number): string {
  return Buffer.from(`${TOKEN_PREFIX}${seq}`).toString("base64url");
}

function decodeToken(token: string): number {
  const text = Buffer.from(token, "base64url").toString();
  const match = new RegExp(`^${TOKEN_PREFIX}(\\d+)$`).exec(text);
  if (!match?.[1]) throw new Ec2Error("InvalidPaginationToken", `Invalid pagination token: ${token}`);
  return Number(match[1]);
}

/** Cuts one page out of `items` (already filtered, in creation order). */
export function paginate<T extends { seq: number }>(items: readonly T[], params: Params, limits: PageLimits): Page<T> {
  const maxResults = params.int("MaxResults");
  if (maxResults !== undefined) {
    if (limits.idsParam && params.list(limits.idsParam).length > 0) {
      throw new Ec2Error(
        "InvalidParameterCombination",
        `The parameter ${limits.idsName ?? limits.idsParam} cannot be used with the parameter maxResults`,
      );
    }
    if (maxResults < limits.min) {
      throw new Ec2Error(
        "InvalidParameterValue",
        `Value ( ${maxResults} ) for parameter maxResults is invalid. ` +
          `Expecting a value greater than or equal to ${limits.min}.`,
      );
    }
  }
  const pageSize = maxResults === undefined ? undefined : Math.min(maxResults, limits.max);
  const token = params.str("NextToken");
  const after = token ? decodeToken(token) : undefined;
  const rest = after === undefined ? [...items] : items.filter((item) => item.seq > after);
  if (pageSize === undefined || rest.length <= pageSize) return { items: rest, nextToken: undefined };
  const page = rest.slice(0, pageSize);
  const last = page[page.length - 1] as T;
  return { items: page, nextToken: encodeToken(last.seq) };
}
