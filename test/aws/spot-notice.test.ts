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
