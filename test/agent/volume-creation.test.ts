/**
 * What config `volumes` makes of every CreateVolume the agent sends (pure: no EC2): encryption,
 * the KMS key, gp3 IOPS and throughput, and the operator's tags beside the agent's own.
 */
import t from "tap";
import { sentCreationParameters, volumeCreation } from "../../src/agent/volume-creation.ts";
import { createVolumeInput } from "../../src/aws/ec2.ts";
import { clientToken } from "../../src/agent/boot/claim.ts";
import { createStep, createVolumeSpec } from "../../src/agent/keeper/plan.ts";
import type { VolumeCreation } from "../../src/agent/ports.ts";
import { defaultConfig, validateConfig } from "../../src/config/index.ts";
import { VolumeTag } from "../../src/tags.ts";

const spec = {
  availabilityZone: "eu-west-1a",
  snapshotId: "snap-1",
  volumeType: "gp3",
  tags: { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool" },
};

t.test("the defaults add nothing: EC2's own defaults and the agent's tags", async (t) => {
  const creation = volumeCreation(defaultConfig());
  t.same(creation, { encrypted: false, tags: {} });
  const input = createVolumeInput({ ...spec, creation, clientToken: "token-1" });
  t.same(
    input,
    {
      AvailabilityZone: "eu-west-1a",
      VolumeType: "gp3",
      SnapshotId: "snap-1",
      TagSpecifications: [
        {
          ResourceType: "volume",
          Tags: [
            { Key: VolumeTag.managed, Value: "true" },
            { Key: VolumeTag.kind, Value: "pool" },
          ],
        },
      ],
      ClientToken: "token-1",
    },
    "no Encrypted=false, no KmsKeyId, no Iops, no Throughput",
  );
});

t.test("configured volumes: every option reaches the request", async (t) => {
  const { config, problems } = validateConfig({
    volumes: {
      encrypted: true,
      kmsKeyId: "alias/ebs-cache",
      iops: 6000,
      throughputMiBps: 500,
      tags: ["CostCenter=1234", "Owner=a=b", "Empty="],
    },
  });
  t.same(problems, []);
  const creation = volumeCreation(config);
  t.same(
    creation,
    {
      encrypted: true,
      kmsKeyId: "alias/ebs-cache",
      iops: 6000,
      throughputMiBps: 500,
      tags: { CostCenter: "1234", Owner: "a=b", Empty: "" },
    },
    "a value may hold '=' (the key ends at the first)",
  );
  const input = createVolumeInput({ ...spec, sizeGiB: 30, creation, clientToken: "token-2" });
  t.equal(input.Encrypted, true);
  t.equal(input.KmsKeyId, "alias/ebs-cache");
  t.equal(input.Iops, 6000);
  t.equal(input.Throughput, 500);
  t.equal(input.Size, 30);
  t.equal(input.ClientToken, "token-2", "the caller's token, sent as it is: the caller's token covers config volumes");
  t.same(
    input.TagSpecifications?.[0]?.Tags?.map((tag) => tag.Key),
    ["CostCenter", "Owner", "Empty", VolumeTag.managed, VolumeTag.kind],
    "the operator's tags and the agent's, on the volume at its creation",
  );
  t.equal(
    createVolumeInput({ ...spec, clientToken: "x" }).Encrypted,
    undefined,
    "no creation settings (tools, tests): nothing added",
  );
});

t.test("a keeper's token covers config volumes, and its step is the request sent", async (t) => {
  const creation: VolumeCreation = {
    encrypted: true,
    kmsKeyId: "alias/k",
    iops: 6000,
    throughputMiBps: 500,
    tags: { A: "1" },
  };
  const settings = {
    pool: "default",
    imageSet: null,
    volumeType: "gp3",
    zones: ["eu-west-1a"],
    minAvailable: 1,
    maxAvailable: 1,
    maxVolumes: 5,
    maxGiB: 100,
    initializationRateMiBps: null,
    quarantineHours: 6,
  };
  const snapshot = { snapshotId: "snap-1", state: "completed" as const, volumeSizeGiB: 8, tags: {} };
  const slot = { zone: "eu-west-1a", slot: 0, zoneVolumeIds: [] };
  const step = (change: Partial<typeof creation> | null = {}) =>
    createStep({ ...settings, ...(change ? { creation: { ...creation, ...change } } : {}) }, snapshot, slot);
  t.equal(step().clientToken, step().clientToken, "the same settings: the same token");
  t.ok(step().clientToken.length <= 64, "within EC2's 64 characters");
  for (const change of [{ iops: 7000 }, { throughputMiBps: 600 }, { kmsKeyId: "alias/other" }, { tags: { A: "2" } }])
    t.not(step(change).clientToken, step().clientToken, `another token when ${JSON.stringify(change)}`);
  t.not(step({ encrypted: false, kmsKeyId: undefined }).clientToken, step().clientToken, "unencrypted");
  t.not(step(null).clientToken, step().clientToken, "none configured");
  t.equal(
    step({ encrypted: false, kmsKeyId: undefined, iops: undefined, throughputMiBps: undefined, tags: {} }).clientToken,
    step(null).clientToken,
    "the defaults ask nothing: the token of a keeper that sends no config volumes",
  );
  const input = createVolumeInput({ clientToken: "", ...createVolumeSpec(step()) });
  t.equal(input.ClientToken, step().clientToken, "the step's token is the one sent");
  t.same(
    [input.Encrypted, input.KmsKeyId, input.Iops, input.Throughput, input.Size],
    [true, "alias/k", 6000, 500, 8],
    "and every setting the step shows",
  );
});

t.test("a boot's token covers each field of its create spec", async (t) => {
  const create = {
    snapshotId: "snap-1",
    availabilityZone: "eu-west-1a",
    volumeType: "gp3",
    initializationRateMiBps: null,
    tags: spec.tags,
  };
  const token = (change: object = {}) => clientToken("i-1", "boot-1", { ...create, ...change });
  t.equal(token(), token(), "a rerun of the same boot: the same token");
  t.not(token({ sizeGiB: 500 }), token(), "the rule's size (instanceTypePools): another token");
  t.not(token({ sizeGiB: 500 }), token({ sizeGiB: 600 }), "another size: another token");
  for (const change of [
    { volumeType: "io2" },
    { availabilityZone: "eu-west-1b" },
    { initializationRateMiBps: 300 },
    { creation: { encrypted: true, tags: {} } },
  ])
    t.not(token(change), token(), `another token when ${JSON.stringify(change)}`);
  t.not(
    token({ creation: { encrypted: true, iops: 6000, tags: {} } }),
    token({ creation: { encrypted: true, iops: 7000, tags: {} } }),
    "config volumes changed: another token",
  );
  const reversed = <T>(record: Record<string, T>) => Object.fromEntries(Object.entries(record).reverse());
  t.equal(
    token({ tags: reversed(spec.tags), creation: { tags: { B: "2", A: "1" }, iops: 6000, encrypted: true } }),
    token({ creation: { encrypted: true, iops: 6000, tags: { A: "1", B: "2" } } }),
    "the same tags and settings in another key order: the same token",
  );
  t.equal(token({ creation: { encrypted: false, tags: {} } }), token(), "config volumes that send nothing: no change");
});

t.test("a token covers config volumes by what the request sends, and only that", async (t) => {
  const variants: VolumeCreation[] = [
    { encrypted: false, tags: {} },
    { encrypted: true, tags: {} },
    { encrypted: false, iops: 6000, tags: {} },
    { encrypted: true, kmsKeyId: "alias/k", iops: 6000, throughputMiBps: 500, tags: { B: "2", A: "1" } },
    { encrypted: false, throughputMiBps: 250, tags: { Owner: "a=b" } },
  ];
  for (const creation of variants) {
    const input = createVolumeInput({ ...spec, creation, clientToken: "x" });
    const operatorTags = (input.TagSpecifications?.[0]?.Tags ?? [])
      .filter((tag) => tag.Key !== undefined && !(tag.Key in spec.tags))
      .map((tag): [string, unknown] => [String(tag.Key), tag.Value])
      .sort(([a], [b]) => (a < b ? -1 : 1));
    const sent = Object.entries({
      Encrypted: input.Encrypted,
      Iops: input.Iops,
      KmsKeyId: input.KmsKeyId,
      Tags: operatorTags.length > 0 ? operatorTags : undefined,
      Throughput: input.Throughput,
    }).filter(([, value]) => value !== undefined);
    t.same(sentCreationParameters(creation), sent, `the parameters sent for ${JSON.stringify(creation)}`);
  }
});

t.test("a keeper's token of a given slot and request is the same in every agent version", async (t) => {
  // A change of these values is a change of every pool's tokens at an upgrade: a keeper of the old
  // version and one of the new planning one slot at once would each make a volume for it. (They
  // changed once, when the hour left the token: the old version's changed every hour anyway.)
  const settings = {
    pool: "default",
    imageSet: null,
    volumeType: "gp3",
    zones: ["eu-west-1a"],
    minAvailable: 1,
    maxAvailable: 1,
    maxVolumes: 5,
    maxGiB: 100,
    initializationRateMiBps: null,
    quarantineHours: 6,
  };
  const snapshot = { snapshotId: "snap-1", state: "completed" as const, volumeSizeGiB: 8, tags: {} };
  const slot = { zone: "eu-west-1a", slot: 1, zoneVolumeIds: ["vol-a"] };
  const token = (creation?: VolumeCreation) =>
    createStep({ ...settings, ...(creation ? { creation } : {}) }, snapshot, slot).clientToken;
  t.equal(token(), "ebs-cache-keeper-0bc1e9f73338844689f364b3e0a48b4df436920a", "no config volumes");
  t.equal(token({ encrypted: false, tags: {} }), token(), "the defaults: as if none");
  t.equal(
    token({ encrypted: true, iops: 6000, tags: { A: "1" } }),
    "ebs-cache-keeper-f5c061fa462704ad7350de72780ca87995ebfa8e",
    "configured",
  );
});
