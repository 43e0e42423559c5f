/**
 * Builds the engine machines' Debian root file systems (src/lab/machines/nspawn-rootfs.ts ENGINES) into
 * their cache, all at once, and exits; those already cached are left as they are.
 *
 *   npx tsx scripts/rootfs.ts
 *
 * `npm test` (scripts/test.sh) starts it in the background before the type-check: a first build
 * takes minutes, mostly spent waiting on Debian's archive and dpkg, and would otherwise start only
 * when test/lab/machines/nspawn-boot.lab.test.ts or test/lab/demo/engine.lab.test.ts reaches it. Those tests ask the
 * same cache (cachedRootfs: a lock per root file system, a marker written last), so they wait for
 * this build, or build it themselves if this one failed: the root file system they boot is the
 * same debootstrap either way, and a failure is theirs to report.
 */
import { ENGINE_NAMES, ENGINES, cachedRootfs, nspawnProblems } from "../src/lab/machines/nspawn-rootfs.ts";

const problems = await nspawnProblems();
if (problems.length > 0) {
  // The tests that need the root file systems say the same, loudly; nothing to build here.
  console.log(`rootfs: not built here: ${problems.join("; ")}`);
  process.exit(0);
}

const results = await Promise.allSettled(
  ENGINE_NAMES.map(async (name) => {
    const engine = ENGINES[name];
    const rootfs = await cachedRootfs(engine, (line) => console.log(`rootfs: ${line}`));
    console.log(
      `rootfs: ${engine.name}: ${rootfs.dir} ` +
        `${rootfs.built ? `built in ${(rootfs.ms / 1000).toFixed(1)} s` : "cached"}`,
    );
  }),
);
for (const result of results) {
  if (result.status === "rejected") console.log(`rootfs: ${String(result.reason).split("\n")[0]}`);
}
process.exit(results.some((result) => result.status === "rejected") ? 1 : 0);
