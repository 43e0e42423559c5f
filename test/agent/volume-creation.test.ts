/**
 * What config `volumes` makes of every CreateVolume the agent sends (pure: no EC2): encryption,
 * the KMS key, gp3 IOPS and throughput, and the operator's tags beside the agent's own.
 */
import t from "tap";
import { volumeCreation } from "../../src/cli/wiring.ts";
import { createVolumeInput } from "../../src/aws/ec2.ts";
import { clientToken } from "../../src/agent/boot/claim.ts";
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
  const input = createVolumeInput(spec, creation, "token-1");
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
  const input = createVolumeInput({ ...spec, sizeGiB: 30 }, creation, "token-2");
  t.equal(input.Encrypted, true);
  t.equal(input.KmsKeyId, "alias/ebs-cache");
  t.equal(input.Iops, 6000);
  t.equal(input.Throughput, 500);
  t.equal(input.Size, 30);
  t.same(
    input.TagSpecifications?.[0]?.Tags?.map((tag) => tag.Key),
    ["CostCenter", "Owner", "Empty", VolumeTag.managed, VolumeTag.kind],
    "the operator's tags and the agent's, on the volume at its creation",
  );
  t.equal(
    createVolumeInput(spec, undefined, "x").Encrypted,
    undefined,
    "no creation settings (tools, tests): nothing added",
  );
});

t.test("the ClientToken covers config volumes: a change of them, another token; the same, the same", async (t) => {
  const creation = { encrypted: true, kmsKeyId: "alias/k", iops: 6000, throughputMiBps: 500, tags: { A: "1" } };
  const token = (change: Partial<typeof creation> = {}) =>
    createVolumeInput(spec, { ...creation, ...change }, "ebs-cache-keeper-" + "a".repeat(40)).ClientToken!;
  t.equal(token(), token(), "the same settings: the same token");
  t.ok(token().length <= 64, "within EC2's 64 characters");
  t.match(token(), /^ebs-cache-keeper-/, "still says whose it is");
  for (const change of [{ iops: 7000 }, { throughputMiBps: 600 }, { kmsKeyId: "alias/other" }, { tags: { A: "2" } }])
    t.not(token(change), token(), `another token when ${JSON.stringify(change)}`);
  t.not(token({ encrypted: false, kmsKeyId: undefined }), token(), "unencrypted");
});

t.test("a boot's token covers each field of its create spec", async (t) => {
  const create = {
    snapshotId: "snap-1",
    availabilityZone: "eu-west-1a",
    volumeType: "gp3",
    initializationRateMiBps: null,
    tags: spec.tags,
  };
  const token = (change: object = {}) => clientToken("i-1", "boot-1", { ...create, ...change }, 0);
  t.equal(token(), token(), "a rerun of the same boot: the same token");
  t.not(token({ sizeGiB: 500 }), token(), "the rule's size (instanceTypePools): another token");
  t.not(token({ sizeGiB: 500 }), token({ sizeGiB: 600 }), "another size: another token");
  for (const change of [{ volumeType: "io2" }, { availabilityZone: "eu-west-1b" }, { initializationRateMiBps: 300 }])
    t.not(token(change), token(), `another token when ${JSON.stringify(change)}`);
});
