/**
 * The one guard before a detach (detachBlocker): still mounted here, mounted in another mount
 * namespace, or a look that fails all keep the volume attached with a message and a way out;
 * only a filesystem live nowhere lets the detach go. No root: the storage port is two functions.
 */
import t from "tap";
import { detachBlocker } from "../../src/agent/detach-guard.ts";
import type { FilesystemLiveness, HostStorage } from "../../src/agent/ports.ts";

type Looks = Pick<HostStorage, "mountPointOf" | "liveness">;

const nowhere: FilesystemLiveness = { holders: [], superblock: false };
const held: FilesystemLiveness = {
  holders: [{ ns: "mnt:[4026532900]", processes: [{ pid: 4242, command: "sleep 600" }], mountPoints: ["/srv/x"] }],
  superblock: true,
};

function looks(mountPoint: string | undefined | Error, live: FilesystemLiveness | Error): Looks & { asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    mountPointOf: async (device) => {
      asked.push(`mountPointOf ${device}`);
      if (mountPoint instanceof Error) throw mountPoint;
      return mountPoint;
    },
    liveness: async (device) => {
      asked.push(`liveness ${device}`);
      if (live instanceof Error) throw live;
      return live;
    },
  };
}

t.test("live nowhere: no blocker, after both looks", async (t) => {
  const storage = looks(undefined, nowhere);
  t.equal(await detachBlocker(storage, "vol-1", "/dev/nvme1n1", "release"), undefined);
  t.same(storage.asked, ["mountPointOf /dev/nvme1n1", "liveness /dev/nvme1n1"]);
});

t.test("still mounted here: blocked, naming where, without asking further", async (t) => {
  const storage = looks("/var/lib/ebs-cache/vol-1", nowhere);
  const blocker = await detachBlocker(storage, "vol-1", "/dev/nvme1n1", "boot");
  t.match(blocker?.message, /^vol-1 is still mounted at \/var\/lib\/ebs-cache\/vol-1: not detaching it/);
  t.match(blocker?.remediation, /fuser -vm \/var\/lib\/ebs-cache\/vol-1.*then run boot again$/);
  t.same(storage.asked, ["mountPointOf /dev/nvme1n1"]);
});

t.test("mounted in another mount namespace: blocked, naming the process", async (t) => {
  const blocker = await detachBlocker(looks(undefined, held), "vol-1", "/dev/nvme1n1", "release");
  t.match(blocker?.message, /still mounted in another mount namespace, held by pid 4242 "sleep 600"/);
  t.match(blocker?.remediation, /kill 4242.*then run release again$/);
});

t.test("a look that fails counts as mounted", async (t) => {
  const table = await detachBlocker(looks(new Error("EACCES"), nowhere), "vol-1", "/dev/nvme1n1", "release");
  t.match(table?.message, /could not learn whether vol-1 is still mounted \(EACCES\): not detaching it/);
  t.match(table?.remediation, /then run release again$/);
  const namespaces = await detachBlocker(looks(undefined, new Error("EPERM")), "vol-1", "/dev/nvme1n1", "boot");
  t.match(
    namespaces?.message,
    /could not learn whether vol-1's filesystem is still mounted in another mount namespace/,
  );
  t.match(namespaces?.remediation, /then run boot again$/);
});
