/**
 * The boot's pool by instance type (config `instanceTypePools`, src/agent/settings.ts): the rule
 * matching IMDS's instance type picks the pool and its volume size; no match or no instance type
 * keeps `pool`; an `ebs-cache:pool` instance tag wins over the rules. Pure.
 */
import t from "tap";
import type { Identity } from "../../src/agent/ports.ts";
import { resolveSettings } from "../../src/agent/settings.ts";
import { validateConfig } from "../../src/config/index.ts";
import { InstanceTag } from "../../src/tags.ts";

const { config, problems } = validateConfig({
  pool: "small",
  instanceTypePools: ["g4dn.*=gpu:500", "m5.*=small:100"],
});
const identity = (over: Partial<Identity>): Identity => ({
  instanceId: "i-0123456789abcdef0",
  region: "eu-west-1",
  availabilityZone: "eu-west-1a",
  tags: {},
  tagsSource: "imds",
  ...over,
});
function boot(over: Partial<Identity>) {
  const resolved = resolveSettings(config, identity(over), { withDocker: false });
  if (!resolved.ok) throw new Error(resolved.problems.join("; "));
  return { boot: resolved.value.boot, notes: resolved.value.notes };
}

t.same(problems, [], "the configuration is valid");

t.test("a large type claims from its pool, at its size", async (t) => {
  const { boot: settings, notes } = boot({ instanceType: "g4dn.8xlarge" });
  t.same([settings.pool, settings.poolSizeGiB], ["gpu", 500]);
  t.match(notes, [/pool gpu \(500 GiB volumes\): instance type g4dn\.8xlarge matches g4dn\.\* \(instanceTypePools\)/]);
});

t.test("a type of the default pool's rule gets its size; a type no rule matches, the default pool", async (t) => {
  t.same(
    [boot({ instanceType: "m5.large" }).boot.pool, boot({ instanceType: "m5.large" }).boot.poolSizeGiB],
    ["small", 100],
  );
  const other = boot({ instanceType: "t3.medium" });
  t.same([other.boot.pool, other.boot.poolSizeGiB], ["small", 100], "pool is small, whose rule says 100 GiB");
  t.match(other.notes, [/instance type t3\.medium matches no rule/]);
  const unknown = boot({});
  t.equal(unknown.boot.pool, "small", "no instance type from IMDS: the default pool");
  t.match(unknown.notes, [/instance type unknown \(IMDS gave none\)/]);
});

t.test("an ebs-cache:pool instance tag wins over the rules", async (t) => {
  const tagged = boot({ instanceType: "g4dn.xlarge", tags: { [InstanceTag.pool]: "special" } });
  t.same([tagged.boot.pool, tagged.boot.poolSizeGiB], ["special", undefined]);
  t.match(tagged.notes, [/instance tag ebs-cache:pool wins over instanceTypePools/]);
  const toGpu = boot({ instanceType: "m5.large", tags: { [InstanceTag.pool]: "gpu" } });
  t.same([toGpu.boot.pool, toGpu.boot.poolSizeGiB], ["gpu", 500], "a tag naming a rule's pool: the pool's size");
});

t.test("without rules, nothing changes", async (t) => {
  const plain = resolveSettings(validateConfig({ pool: "p" }).config, identity({ instanceType: "g4dn.xlarge" }), {
    withDocker: false,
  });
  t.ok(plain.ok);
  if (!plain.ok) return;
  t.same([plain.value.boot.pool, plain.value.boot.poolSizeGiB], ["p", undefined]);
  t.notMatch(plain.value.notes.join("\n"), /instanceTypePools/);
});
