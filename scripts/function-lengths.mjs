// Lists the product functions (src/**, the lab apart: it is a separate program that plays the
// outside world) of at least --min lines, largest first, counted as the lint rule
// max-lines-per-function counts them (blank lines and comments skipped), so the figure a split is
// judged by is the one the rule enforces; --raw counts every line.
// Usage: node scripts/function-lengths.mjs [--min 100] [--raw]
import process from "node:process";
import { ESLint } from "eslint";
import tseslint from "typescript-eslint";

const minArg = process.argv.indexOf("--min");
const min = minArg > 0 ? Number(process.argv[minArg + 1]) : 100;
const raw = process.argv.includes("--raw");

const eslint = new ESLint({
  overrideConfigFile: true,
  ignorePatterns: ["src/lab/**"],
  overrideConfig: [
    {
      files: ["**/*.ts"],
      languageOptions: { parser: tseslint.parser },
      rules: {
        "max-lines-per-function": ["error", { max: min - 1, skipBlankLines: !raw, skipComments: !raw }],
      },
    },
  ],
});

const results = await eslint.lintFiles(["src/**/*.ts"]);
const rows = [];
for (const result of results) {
  for (const message of result.messages) {
    if (message.ruleId !== "max-lines-per-function") continue;
    // "Function 'name' has too many lines (N). Maximum allowed is M."
    const match = /^(.*) has too many lines \((\d+)\)/.exec(message.message);
    if (!match) continue;
    rows.push({
      lines: Number(match[2]),
      what: match[1],
      where: `${result.filePath.replace(process.cwd() + "/", "")}:${message.line}`,
    });
  }
}
rows.sort((a, b) => b.lines - a.lines);
for (const row of rows) process.stdout.write(`${String(row.lines).padStart(4)}  ${row.what}  ${row.where}` + "\n");
process.stdout.write(`${rows.length} product functions of ${min} lines or more` + "\n");
