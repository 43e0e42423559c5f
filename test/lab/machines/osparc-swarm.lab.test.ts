/**
 * Two runs of the lab's swarm at once on one machine (a test and a bench, two test files): each
 * takes a subnet of its own, free of the machine's addresses and routes and of the other run, its
 * link in the machine's namespace (where nspawn machines live) has its own name and address, and
 * each run's clean-up removes only what it made. The nspawn join itself: nspawn-boot.lab.test.ts.
 */
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import t from "tap";
import { run } from "../../../src/exec.ts";
import { startOsparcSwarm } from "../../../src/lab/machines/osparc-swarm.ts";
import { assertDockerPrerequisites } from "../../fixtures/lab/lab-prereq.ts";

assertDockerPrerequisites("test/lab/machines/osparc-swarm.lab.test.ts");

const top = await mkdtemp("/var/tmp/ebs-cache-lab-swarms-");
t.teardown(() => rm(top, { recursive: true, force: true }));

/** The IPv4 addresses of the machine's namespace, by link. */
async function addresses(): Promise<Map<string, string>> {
  const { stdout } = await run("ip", ["-o", "-4", "addr", "show"]);
  return new Map(
    [...stdout.matchAll(/^\d+: (\S+)\s+inet (\S+)/gm)].map((m) => [m[1]!.split("@")[0]!, m[2]!] as [string, string]),
  );
}

t.test("two swarms at once: two subnets, two links; each clean-up removes its own only", async (t) => {
  const before = await addresses();
  const [a, b] = await Promise.all([startOsparcSwarm(join(top, "a")), startOsparcSwarm(join(top, "b"))]);
  let stopped = false;
  t.teardown(async () => {
    if (!stopped) await Promise.all([a.stop(), b.stop()]);
  });
  const [removeA, removeB] = [await a.linkHere("ebstst"), await b.linkHere("ebstst")];
  const [targetA, targetB] = [await a.joinTarget(), await b.joinTarget()];
  const [hereA, hereB] = [targetA.here!, targetB.here!];
  t.not(hereA.advertiseAddress.split(".")[1], hereB.advertiseAddress.split(".")[1], "two /16s");
  t.not(targetA.address, targetB.address, "two managers' addresses");
  t.not(hereA.gatewayBridge.name, hereB.gatewayBridge.name, "two gateway bridges' names");
  const during = await addresses();
  const made = [...during].filter(([link]) => !before.has(link));
  t.equal(made.length, 2, `two links made here: ${JSON.stringify(made)}`);
  t.same(made.map(([, cidr]) => cidr.split("/")[0]).sort(), [hereA.advertiseAddress, hereB.advertiseAddress].sort());
  for (const cidr of before.values()) {
    const [x, y] = cidr.split(".");
    for (const here of [hereA, hereB])
      t.not(`${x}.${y}`, here.advertiseAddress.split(".").slice(0, 2).join("."), `clear of ${cidr}`);
  }
  const states = await Promise.all([a, b].map((s) => s.manager.docker(["info", "-f", "{{.Swarm.LocalNodeState}}"])));
  t.same(
    states.map((v) => v.stdout.trim()),
    ["active", "active"],
    "both managers are swarms",
  );

  await removeA();
  const afterA = await addresses();
  t.notOk(
    [...afterA.values()].some((cidr) => cidr.startsWith(`${hereA.advertiseAddress}/`)),
    "the first run's link is gone",
  );
  t.ok(
    [...afterA.values()].some((cidr) => cidr.startsWith(`${hereB.advertiseAddress}/`)),
    "the second run's link is still there",
  );
  await removeB();
  await Promise.all([a.stop(), b.stop()]);
  stopped = true;
  t.same([...(await addresses()).keys()].sort(), [...before.keys()].sort(), "the machine as before");
  // Released: no reservation of either run is left.
  for (const here of [hereA, hereB]) {
    const prefix = here.advertiseAddress.split(".").slice(0, 2).join(".");
    t.notOk(existsSync(`/run/ebs-cache-agent-lab/subnets/${prefix}`), `${prefix} released`);
  }
});
