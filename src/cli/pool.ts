/** `ebs-cache-agent pool`: the managed volumes, as a table or JSON. */
import { Command } from "commander";
import { validatePoolName } from "../inputs.ts";
import { observePool } from "../agent/pool/observe.ts";
import { poolRows, renderPoolTable } from "../agent/pool/view.ts";
import { ConfigError } from "../errors.ts";
import { hostContext } from "./common.ts";

export function poolCommand(): Command {
  return new Command("pool")
    .description("list the pool and workspace volumes the agent manages: zone, state, claimed-by, age, expiry, last error (quarantined)")
    .option("-c, --config <path>", "config file (default /etc/ebs-cache-agent/config.json, or $EBS_CACHE_AGENT_CONFIG)")
    .option("--pool <name>", "only this pool")
    .option("--json", "JSON for scripts")
    .action(async (opts: { config?: string; pool?: string; json?: boolean }) => {
      if (opts.pool !== undefined) {
        const check = validatePoolName(opts.pool);
        if (!check.ok) throw new ConfigError([`--pool: ${check.problem}`]);
      }
      const context = await hostContext(opts.config);
      const volumes = await observePool(await context.cloud(), opts.pool !== undefined ? { pool: opts.pool } : {});
      const rows = poolRows(volumes, new Date(), context.config.claim.quarantineHours);
      process.stdout.write((opts.json ? JSON.stringify(rows, null, 2) : renderPoolTable(rows)) + "\n");
    });
}
