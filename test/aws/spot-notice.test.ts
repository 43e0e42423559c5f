/** The spot interruption notice reader, against the lab's IMDS emulator (real IMDSv2 token flow). */
import t from "tap";
import { createMetadataService, type MetadataSource } from "../../src/aws/imds.ts";
import { ImdsError } from "../../src/aws/errors.ts";
import { readSpotInstanceAction } from "../../src/aws/spot-notice.ts";
import { startImdsEmulator } from "../../src/lab/imds/imds.ts";

const imds = await startImdsEmulator({
  instance: () => ({
    instanceId: "i-0123456789abcdef0",
    region: "us-east-1",
    availabilityZone: "us-east-1a",
    tags: {},
    metadataTags: false,
    hostRoot: "/nonexistent",
  }),
});
t.teardown(() => imds.close());
const metadata = createMetadataService({ endpoint: imds.endpoint });

t.test("no notice: undefined (the path is a 404); a notice: its action", async (t) => {
  t.equal(await readSpotInstanceAction(metadata, { timeoutMs: 5000 }), undefined);
  for (const action of ["stop", "hibernate", "terminate"] as const) {
    imds.setSpotInstanceAction({ action, time: "2030-01-01T12:00:00Z" });
    t.equal(await readSpotInstanceAction(metadata, { timeoutMs: 5000 }), action, action);
  }
  imds.setSpotInstanceAction(undefined);
  t.equal(await readSpotInstanceAction(metadata, { timeoutMs: 5000 }), undefined, "withdrawn");
});

t.test("each way IMDS fails a read, in its words: odd data shown trimmed, a refusal, a failure", async (t) => {
  const answering = (text: string): MetadataSource => ({ endpoint: "fake", request: async () => text });
  const odd = await readSpotInstanceAction(answering('{"action":"reboot"}'), { timeoutMs: 1000 }).catch(
    (e: unknown) => e,
  );
  t.type(odd, ImdsError);
  t.match(odd, { kind: "unexpected-data" });
  t.equal(
    (odd as Error).message,
    "the instance metadata service at fake answered /latest/meta-data/spot/instance-action with unexpected data " +
      '(a notice {"action": "stop" | "hibernate" | "terminate", …} expected): "{\\"action\\":\\"reboot\\"}"',
  );
  t.match((odd as ImdsError).remediation, /something other than EC2's instance metadata service answers at fake/);
  const page = `<html>${"x".repeat(500)}</html>`;
  const long = (await readSpotInstanceAction(answering(page), { timeoutMs: 1000 }).catch((e: unknown) => e)) as Error;
  t.match(long.message, /unexpected data .*: "<html>x+…"$/, "a long answer trimmed");
  t.ok(long.message.length < 300, "not all of it");
  t.notMatch(long.message, /refused/, "odd data is not a refusal");

  const failing = (error: Error): MetadataSource => ({
    endpoint: "fake",
    request: () => Promise.reject(error),
  });
  const status = (code: number) =>
    Object.assign(new Error(`Request failed with status code ${code}`), { $metadata: { httpStatusCode: code } });
  const kinds: Array<[string, Error, string, RegExp]> = [
    ["a 403", status(403), "refused", /at fake refused \/latest\/meta-data\/spot\/instance-action \(HTTP 403\): /],
    [
      "no connection",
      new Error("Error making request to the metadata service: Error: connect ECONNREFUSED 127.0.0.1:9"),
      "refused",
      /at fake refused the connection for \/latest\/meta-data\/spot\/instance-action: .*ECONNREFUSED/,
    ],
    ["a 503", status(503), "failed", /at fake failed \/latest\/meta-data\/spot\/instance-action \(HTTP 503\): /],
    [
      "a reset",
      new Error("socket hang up"),
      "failed",
      /at fake did not answer \/latest\/meta-data\/spot\/instance-action: socket hang up/,
    ],
  ];
  for (const [what, error, kind, says] of kinds) {
    const thrown = await readSpotInstanceAction(failing(error), { timeoutMs: 1000 }).catch((e: unknown) => e);
    t.type(thrown, ImdsError, what);
    t.match(thrown, { kind, message: says }, what);
    if (kind === "failed") {
      t.notMatch((thrown as Error).message, /refused/, `${what}: not told as a refusal`);
      t.match((thrown as ImdsError).remediation, /^IMDS failed on its side: re-run the agent/, `${what}: a rerun`);
    } else t.match((thrown as ImdsError).remediation, /only runs on EC2 instances/, `${what}: where it runs`);
  }
});

t.test("an unreadable notice, a failing or silent IMDS: ImdsError naming the path", async (t) => {
  const answering = (text: string): MetadataSource => ({ endpoint: "fake", request: async () => text });
  for (const text of ["not json", "null", '{"action":"reboot"}', "[]"]) {
    await t.rejects(readSpotInstanceAction(answering(text), { timeoutMs: 1000 }), ImdsError, text);
  }
  imds.unavailableFor(1, "503");
  const error = await readSpotInstanceAction(metadata, { timeoutMs: 5000 }).catch((e: unknown) => e);
  t.ok(error instanceof ImdsError, "503: ImdsError");
  t.match((error as Error).message, /spot\/instance-action/);
  const silent: MetadataSource = { endpoint: "fake", request: () => new Promise(() => undefined) };
  await t.rejects(
    readSpotInstanceAction(silent, { timeoutMs: 50 }),
    /no answer within 50 ms/,
    "bounded by its timeout",
  );
});
