/**
 * EC2 calls per pool boot, counted by the emulator, at pools of 1, 100 and 1000 available
 * volumes: a real `ebs-cache-agent boot` process claims one, and the requests signed with its
 * host's credentials are counted. The count must not grow with the pool (the agent asks EC2 for
 * a bounded page of candidates) and must stay within 5.
 *
 * The pool volumes look used (an earlier release's released-at / expires-at), as a pool does in
 * its steady state. Big pools are cheap: one real volume, the others sharing its image
 * (test/fixtures/lab/cheap-pool.ts); each size is a pool of its own, and its claimed volume stays
 * attached to its host (the next size's volumes share another image). No faults: a throttled
 * request would be a second request.
 */
import t from "tap";
import { startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { measureBootCalls, type BootCalls } from "../../fixtures/lab/herd.ts";
import { earlierRelease } from "../../fixtures/kill/kill-matrix.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const SIZES = [1, 100, 1000];
/** The goal for one pool boot. */
const MAX_CALLS = 5;

const bl = await startBootLab({ name: "test-boot-calls" });
t.teardown(() => bl.close());

const perBoot: BootCalls[] = [];

for (const size of SIZES) {
  t.test(`a pool boot with ${size} available pool volume(s) makes at most ${MAX_CALLS} EC2 calls`, async (t) => {
    const measured = await measureBootCalls(bl, size, earlierRelease());
    perBoot.push(measured);
    t.comment(`pool of ${size}: ${measured.calls} EC2 calls ${JSON.stringify(measured.byAction)}`);
    t.equal(measured.exitCode, 0, "the boot exits 0");
    t.equal(measured.outcome, "prepared", "it prepared the node on a pool volume");
    t.ok(measured.calls <= MAX_CALLS, `${measured.calls} EC2 calls ≤ ${MAX_CALLS}`, { byAction: measured.byAction });
  });
}

t.test("the count does not grow with the pool", async (t) => {
  t.equal(perBoot.length, SIZES.length, "every size was measured");
  t.same(
    perBoot.map((b) => b.calls),
    perBoot.map(() => perBoot[0]?.calls),
    `the same number of calls at pools of ${SIZES.join(", ")}`,
    { perBoot: perBoot.map((b) => ({ size: b.size, calls: b.calls, byAction: b.byAction })) },
  );
});

t.test("the lab closes and leaves no loop device, mount or dockerd behind", async (t) => {
  t.same(await bl.close(), { rootExists: false, loopDevices: [], mounts: [], dockerds: [] });
});
