/**
 * The lab swarm's subnet reservations (src/lab/machines/lab-subnet.ts) in a folder of the test's
 * own: runs racing for subnets never share one, and a reservation whose run is gone is taken over,
 * by one racer only. Two swarms started at once once got the same subnet: the second saw the
 * first's reservation before its pid was written and took it for a dead run's.
 */
import t from "tap";
import { spawnSync } from "node:child_process";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { reserveLabSubnet } from "../../../src/lab/machines/lab-subnet.ts";

const folder = await mkdtemp(join(tmpdir(), "lab-subnets-"));
t.teardown(() => rm(folder, { recursive: true, force: true }));

/** A pid no process has now: a child's, after it ended. */
const deadPid = () => spawnSync("true").pid!;

t.test("twelve reservations at once in one process: twelve subnets, each file holding its pid", async (t) => {
  const dir = join(folder, "race");
  const subnets = await Promise.all(Array.from({ length: 12 }, () => reserveLabSubnet(dir)));
  const prefixes = subnets.map((s) => s.prefix);
  t.equal(new Set(prefixes).size, 12, `all different: ${prefixes.join(" ")}`);
  for (const s of subnets) t.equal((await readFile(join(dir, s.prefix), "utf8")).trim(), String(process.pid));
  await Promise.all(subnets.map((s) => s.release()));
  t.same(await readdir(dir), [], "released, nothing left (no pid files aside)");
});

t.test("a dead run's reservation (file, or the older folder form) is taken over once", async (t) => {
  const dir = join(folder, "stale");
  const first = await reserveLabSubnet(dir);
  await first.release();
  // The first free subnet, held by a run that is gone, and the next one by the older folder form.
  const [a, b] = [first.octet, first.octet + 1];
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, `10.${a}`), `${deadPid()}\n`);
  await mkdir(join(dir, `10.${b}`));
  await writeFile(join(dir, `10.${b}`, "pid"), `${deadPid()}\n`);
  const racers = await Promise.all([reserveLabSubnet(dir), reserveLabSubnet(dir), reserveLabSubnet(dir)]);
  const octets = racers.map((r) => r.octet).sort((x, y) => x - y);
  t.equal(new Set(octets).size, 3, `three racers, three subnets: ${octets.join(" ")}`);
  t.ok(octets.includes(a) && octets.includes(b), "both stale ones were taken over");
  await Promise.all(racers.map((r) => r.release()));
});

t.test("a live run's reservation is never taken", async (t) => {
  const dir = join(folder, "live");
  const held = await reserveLabSubnet(dir);
  const other = await reserveLabSubnet(dir);
  t.not(other.octet, held.octet, "the next run takes the next subnet");
  t.equal((await readFile(join(dir, held.prefix), "utf8")).trim(), String(process.pid), "the held one untouched");
  await Promise.all([held.release(), other.release()]);
});
