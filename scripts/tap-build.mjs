// `tap build`, when tap's test class was built with other plugins than package.json's "tap"
// names: run first by `npm test` (scripts/test.sh) and `npm run test:unit`.
//
// A tap run that finds the built list stale rebuilds it for the next run, but starts its own
// test files with the old list's loaders: after a fresh `npm ci`, that is @tapjs/typescript's
// ts-node and @tapjs/mock's hooks beside tsx in every file of the first run (about 3 s of CPU a
// file). A build costs some 6 s of CPU, so it runs only when the list changed; the check loads
// what tap's runner would (its config and the built class' signature), a fifth of a second.
import { spawnSync } from "node:child_process";
import process from "node:process";
import { fileURLToPath, URL } from "node:url";
import { TapConfig } from "@tapjs/config";
import { signature } from "@tapjs/test";

const config = await TapConfig.load();
if (config.pluginSignature !== signature) {
  const tap = fileURLToPath(new URL("../node_modules/.bin/tap", import.meta.url));
  const build = spawnSync(process.execPath, [tap, "build"], { stdio: ["ignore", "pipe", "pipe"], encoding: "utf8" });
  if (build.status !== 0) {
    process.stderr.write(`${build.stdout ?? ""}${build.stderr ?? ""}${build.error ?? ""}\n# tap build failed\n`);
    process.exit(1);
  }
}
