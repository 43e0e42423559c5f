/**
 * `prewarm.giveWay`: how the background initialization gives way to others' reads and writes. Its defaults
 * are the pacing the host uses when given none (src/host/read-pace.ts), each value is held to its
 * range with a message naming the key, a pause longer than the longest stop is refused, and the
 * environment sets it like any key.
 */
import t from "tap";
import { applyEnvOverrides, defaultConfig, loadConfig, validateConfig } from "../../src/config/index.ts";
import { ConfigError } from "../../src/errors.ts";
import { prewarmSettingsFrom } from "../../src/agent/prewarm/plan.ts";
import { DEFAULT_PACE } from "../../src/host/read-pace.ts";

t.test(
  "defaults: giving way on, 250 ms runs, 100 ms pauses, at most 5 s stopped, 1 s of quiet to go on, any request",
  async (t) => {
    t.same(defaultConfig().prewarm.giveWay, {
      enabled: true,
      runMs: 250,
      pauseMs: 100,
      maxPausedMs: 5000,
      settleMs: 1000,
      othersIops: 0,
    });
    const { drainMs: _drain, ...host } = DEFAULT_PACE;
    t.same(prewarmSettingsFrom(defaultConfig()).giveWay, host, "the host's own defaults are the config's");
  },
);

t.test("values out of range: one problem each, naming the key and its range; the defaults stay", async (t) => {
  const { problems, config } = validateConfig({
    prewarm: {
      giveWay: { enabled: "yes", runMs: 0, pauseMs: 10001, maxPausedMs: 1.5, othersIops: -1, settleMs: 0.5 },
    },
  });
  t.same(problems.sort(), [
    'prewarm.giveWay.enabled: must be a boolean (true or false), got "yes"',
    "prewarm.giveWay.maxPausedMs: must be an integer between 10 and 600000, got 1.5",
    "prewarm.giveWay.othersIops: must be a number between 0 and 1000000, got -1",
    "prewarm.giveWay.pauseMs: must be an integer between 10 and 10000, got 10001",
    "prewarm.giveWay.runMs: must be an integer between 10 and 60000, got 0",
    "prewarm.giveWay.settleMs: must be an integer between 0 and 600000, got 0.5",
  ]);
  t.same(config.prewarm.giveWay, defaultConfig().prewarm.giveWay);
  t.match(validateConfig({ prewarm: { giveWay: { runsMs: 300 } } }).problems, [/prewarm\.giveWay\.runsMs.*runMs/]);
});

t.test("a longest stop shorter than one pause would never stop: refused unless giving way is off", async (t) => {
  t.same(validateConfig({ prewarm: { giveWay: { pauseMs: 200, maxPausedMs: 150 } } }).problems, [
    "prewarm.giveWay.maxPausedMs: 150 is below prewarm.giveWay.pauseMs (200), so fio would never stay stopped " +
      "while others read; raise it, or set prewarm.giveWay.enabled to false",
  ]);
  t.same(validateConfig({ prewarm: { giveWay: { pauseMs: 200, maxPausedMs: 200 } } }).problems, [], "equal: one pause");
  t.same(
    validateConfig({ prewarm: { giveWay: { enabled: false, pauseMs: 200, maxPausedMs: 150 } } }).problems,
    [],
    "off: the pacing is not used",
  );
});

t.test("the environment sets it, and a file plus the environment is checked as a whole", async (t) => {
  const { config, problems } = applyEnvOverrides(defaultConfig(), {
    EBS_CACHE_AGENT_PREWARM__GIVE_WAY__RUN_MS: "500",
    EBS_CACHE_AGENT_PREWARM__GIVE_WAY__OTHERS_IOPS: "2.5",
    EBS_CACHE_AGENT_PREWARM__GIVE_WAY__SETTLE_MS: "0",
  });
  t.same(problems, []);
  t.same(prewarmSettingsFrom(config).giveWay, {
    runMs: 500,
    pauseMs: 100,
    maxPausedMs: 5000,
    settleMs: 0,
    quietIops: 2.5,
  });
  const off = applyEnvOverrides(defaultConfig(), { EBS_CACHE_AGENT_PREWARM__GIVE_WAY__ENABLED: "false" });
  t.equal(prewarmSettingsFrom(off.config).giveWay, null, "off: the settings carry no pacing");

  const dir = t.testdir({ "c.json": JSON.stringify({ prewarm: { giveWay: { pauseMs: 1000 } } }) });
  const error: unknown = await loadConfig({
    path: `${dir}/c.json`,
    env: { EBS_CACHE_AGENT_PREWARM__GIVE_WAY__MAX_PAUSED_MS: "500" },
  }).catch((e: unknown) => e);
  t.ok(error instanceof ConfigError, "refused");
  t.match((error as ConfigError).problems, [
    /^prewarm\.giveWay\.maxPausedMs: 500 is below prewarm\.giveWay\.pauseMs \(1000\)/,
  ]);
});
