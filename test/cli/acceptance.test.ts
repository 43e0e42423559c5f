/**
 * `ebs-cache-agent acceptance` without --yes, as a process of the production build: it refuses in
 * one line on stderr, exit 2, before it reads the config or asks IMDS or EC2 anything (a config
 * file that does not exist is not even looked at); its --help says what it creates and needs.
 * No root, no lab.
 */
import { execa } from "execa";
import t from "tap";
import { REFUSAL } from "../../src/cli/acceptance.ts";
import { ExitCode } from "../../src/errors.ts";
import { agentBundle, withCompileCache } from "../fixtures/lab/agent-bundle.ts";
import { childEnv } from "../fixtures/lab/lab-prereq.ts";

const CLI = await agentBundle();
const env = await withCompileCache(childEnv());

async function agent(args: string[]) {
  const result = await execa(process.execPath, [CLI, ...args], {
    env: { ...env, EBS_CACHE_AGENT_CONFIG: "/nonexistent/config.json" },
    extendEnv: false,
    reject: false,
    stdin: "ignore",
    timeout: 60_000,
  });
  return { exitCode: result.exitCode, stdout: String(result.stdout), stderr: String(result.stderr) };
}

t.test("without --yes: one line, exit 2, nothing read or asked", async (t) => {
  for (const args of [["acceptance"], ["acceptance", "--output", "/tmp/x.json", "--config", "/nonexistent.json"]]) {
    const run = await agent(args);
    t.equal(run.exitCode, ExitCode.usage, `${args.join(" ")}: exit 2`);
    // execa drops the final newline: the whole of stderr is the one line.
    t.equal(run.stderr, REFUSAL, "one line, the refusal");
    t.equal(run.stdout, "");
  }
});

t.test("--help says what it creates, what it needs and its exit codes", async (t) => {
  const run = await agent(["acceptance", "--help"]);
  t.equal(run.exitCode, 0);
  // commander wraps the text at its width: a phrase may break at any space.
  const phrase = (text: string) =>
    new RegExp(
      text
        .split(" ")
        .map((word) => word.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&"))
        .join("\\s+"),
    );
  for (const said of [
    "--yes",
    "--output <file>",
    "ebs-cache:acceptance=<run id>",
    "read-only",
    "queue depths 1, 8 and 32",
    "iam/ebs-cache-agent-policy.json",
    "2 usage (--yes missing)",
  ])
    t.match(run.stdout, phrase(said), said);
});
