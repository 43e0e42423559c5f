/**
 * The mounts a lab file's own mount namespace drops as it starts (test/fixtures/lab/lab-namespace.ts):
 * those another lab or test left where labs and tests mount, never the machine's own. No root.
 */
import t from "tap";
import { foreignLabMounts } from "../fixtures/lab/lab-namespace.ts";

const PLACES = ["/var/tmp/ebs-cache-lab", "/tmp/"];

const line = (id: number, target: string, source: string, fsType = "xfs") =>
  `${id} 22 7:${id} / ${target} rw,noatime - ${fsType} ${source} rw`;

t.test("below a place labs mount, topmost only, escapes read; the machine's own mounts stay", async (t) => {
  const mountinfo = [
    "22 1 259:1 / / rw,relatime - ext4 /dev/nvme0n1p1 rw",
    "23 22 0:21 / /tmp rw - tmpfs tmpfs rw",
    line(30, "/var/tmp/ebs-cache-lab/other-abc/hosts/i-1/var/lib/ebs-cache/vol-1", "/dev/loop3"),
    line(
      31,
      "/var/tmp/ebs-cache-lab/other-abc/hosts/i-1/var/lib/ebs-cache/vol-1/docker/overlay2/x/merged",
      "overlay",
      "overlay",
    ),
    line(32, "/tmp/ebs-cache-agent-test-x/with\\040space", "/dev/loop4"),
    line(33, "/snap/core/1", "/dev/loop5", "squashfs"),
    line(34, "/var/tmp/ebs-cache-lab", "/dev/loop6"),
  ].join("\n");
  t.same(foreignLabMounts(mountinfo, PLACES), [
    "/tmp/ebs-cache-agent-test-x/with space",
    "/var/tmp/ebs-cache-lab/other-abc/hosts/i-1/var/lib/ebs-cache/vol-1",
  ]);
  t.same(foreignLabMounts("", PLACES), [], "nothing mounted: nothing to drop");
});
