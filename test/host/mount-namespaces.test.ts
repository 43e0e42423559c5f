/**
 * Which mount namespaces still mount a filesystem (namespacesHolding, from mountinfo text), and
 * the release's decision from it (liveElsewhere): a refusal naming the processes, or none. No root.
 */
import t from "tap";
import { liveElsewhere } from "../../src/agent/detach-guard.ts";
import { namespacesHolding, readNamespaces, type NamespaceView } from "../../src/host/mount-namespaces.ts";

const HOST = [
  "22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw",
  "95 22 259:3 / /var/lib/ebs-cache/vol-1 rw,noatime shared:60 - xfs /dev/nvme1n1 rw,nouuid",
].join("\n");
// A private copy made after the mount (`unshare --mount`): the agent's unmount never reaches it.
const PRIVATE = [
  "400 399 259:1 / / rw,relatime - ext4 /dev/nvme0n1p1 rw",
  "401 400 259:3 / /var/lib/ebs-cache/vol-1 rw,noatime - xfs /dev/nvme1n1 rw,nouuid",
  "402 400 259:3 /docker/volumes/x /srv/with\\040space rw,noatime - xfs /dev/nvme1n1 rw,nouuid",
].join("\n");

const views: NamespaceView[] = [
  { ns: "mnt:[4026531841]", processes: [{ pid: 1, command: "/sbin/init" }], mountinfo: HOST.split("\n")[0]! },
  {
    ns: "mnt:[4026532900]",
    processes: [
      { pid: 4242, command: "unshare --mount --fork -- sleep 600" },
      { pid: 4243, command: "sleep 600" },
    ],
    mountinfo: PRIVATE,
  },
];

t.test("namespacesHolding: only the namespaces whose table shows the device, with every mount point", async (t) => {
  const holders = namespacesHolding(views, "259:3");
  t.same(holders, [
    {
      ns: "mnt:[4026532900]",
      processes: views[1]!.processes,
      mountPoints: ["/var/lib/ebs-cache/vol-1", "/srv/with space"],
    },
  ]);
  t.same(namespacesHolding(views, "259:7"), [], "another device: held nowhere");
  t.same(namespacesHolding([{ ...views[0]!, mountinfo: HOST }], "259:3").length, 1, "the agent's own table counts");
});

t.test("liveElsewhere: refuses naming pid and command, says how to end it; nothing when live nowhere", async (t) => {
  const refusal = liveElsewhere("vol-1", { holders: namespacesHolding(views, "259:3"), superblock: true });
  t.ok(refusal, "refused");
  t.match(refusal?.message, /^vol-1's filesystem is still mounted in another mount namespace, held by pid 4242 /);
  t.match(refusal?.message, /"unshare --mount --fork -- sleep 600", pid 4243 "sleep 600" \(mnt:\[4026532900\]/);
  t.match(refusal?.message, /stays attached and untagged: a mounted volume is never detached$/);
  t.match(refusal?.remediation, /^stop those processes \(kill 4242 4243\), or unmount it in their namespace/);
  t.match(refusal?.remediation, /nsenter -t 4242 -m umount \/var\/lib\/ebs-cache\/vol-1\), then run release again$/);
  t.match(liveElsewhere("vol-1", { holders: namespacesHolding(views, "259:3"), superblock: false }, "boot"), {
    remediation: /then run boot again$/,
  });

  const many = Array.from({ length: 8 }, (_, i) => ({ pid: 100 + i, command: "worker" }));
  const crowded = liveElsewhere("vol-1", {
    holders: [{ ns: "mnt:[1]", processes: many, mountPoints: ["/m"] }],
    superblock: true,
  });
  t.match(crowded?.message, /pid 104 "worker" and 3 more \(mnt:\[1\], at \/m\)/, "names five, counts the rest");

  const pinned = liveElsewhere("vol-1", { holders: [], superblock: true });
  t.match(pinned?.message, /mounted in a mount namespace no process is in/, "the kernel still holds it: refused");
  t.match(pinned?.remediation, /findmnt -t nsfs/);

  t.equal(liveElsewhere("vol-1", { holders: [], superblock: false }), undefined, "live nowhere: the detach may go");
});

t.test("readNamespaces: this process's namespace is read once, with this process in it", async (t) => {
  const read = await readNamespaces();
  const ns = read.map((view) => view.ns);
  t.equal(new Set(ns).size, ns.length, "one view per namespace");
  const own = read.find((view) => view.processes.some((p) => p.pid === process.pid));
  t.ok(own, "this process is found");
  t.match(own?.mountinfo, / - /, "with its mount table");
});
