/** What gc looks at: every managed volume of the region, in one filtered DescribeVolumes (all pages). */
import { VolumeTag } from "../../tags.ts";
import type { CloudVolumes, VolumeInfo } from "../ports.ts";

/** The volumes tagged `ebs-cache:managed=true`; gc never sees any other. */
export function observeGc(cloud: CloudVolumes): Promise<VolumeInfo[]> {
  return cloud.findVolumes({ tags: { [VolumeTag.managed]: "true" } });
}
