/**
 * The EC2 SDK calls the agent makes, and nothing else: the narrow interface `ec2.ts` is written
 * against (as aws-ebs-csi-driver's `ec2_interface.go`). Adding a call here is adding a line to
 * the IAM policy.
 */
import {
  AttachVolumeCommand,
  CreateTagsCommand,
  CreateVolumeCommand,
  DeleteTagsCommand,
  DeleteVolumeCommand,
  DescribeSnapshotsCommand,
  DescribeTagsCommand,
  DescribeVolumesCommand,
  DescribeVolumeStatusCommand,
  DetachVolumeCommand,
  EC2Client,
  type AttachVolumeCommandInput,
  type AttachVolumeCommandOutput,
  type CreateTagsCommandInput,
  type CreateTagsCommandOutput,
  type CreateVolumeCommandInput,
  type CreateVolumeCommandOutput,
  type DeleteTagsCommandInput,
  type DeleteTagsCommandOutput,
  type DeleteVolumeCommandInput,
  type DeleteVolumeCommandOutput,
  type DescribeSnapshotsCommandInput,
  type DescribeSnapshotsCommandOutput,
  type DescribeTagsCommandInput,
  type DescribeTagsCommandOutput,
  type DescribeVolumesCommandInput,
  type DescribeVolumesCommandOutput,
  type DescribeVolumeStatusCommandInput,
  type DescribeVolumeStatusCommandOutput,
  type DetachVolumeCommandInput,
  type DetachVolumeCommandOutput,
} from "@aws-sdk/client-ec2";

/** The EC2 actions the agent uses. */
export interface Ec2Api {
  describeVolumes(input: DescribeVolumesCommandInput): Promise<DescribeVolumesCommandOutput>;
  describeSnapshots(input: DescribeSnapshotsCommandInput): Promise<DescribeSnapshotsCommandOutput>;
  createVolume(input: CreateVolumeCommandInput): Promise<CreateVolumeCommandOutput>;
  attachVolume(input: AttachVolumeCommandInput): Promise<AttachVolumeCommandOutput>;
  detachVolume(input: DetachVolumeCommandInput): Promise<DetachVolumeCommandOutput>;
  createTags(input: CreateTagsCommandInput): Promise<CreateTagsCommandOutput>;
  deleteTags(input: DeleteTagsCommandInput): Promise<DeleteTagsCommandOutput>;
  describeTags(input: DescribeTagsCommandInput): Promise<DescribeTagsCommandOutput>;
  deleteVolume(input: DeleteVolumeCommandInput): Promise<DeleteVolumeCommandOutput>;
  describeVolumeStatus(input: DescribeVolumeStatusCommandInput): Promise<DescribeVolumeStatusCommandOutput>;
}

/** The interface over a real SDK client (its retry strategy applies to every call). */
export function sdkEc2Api(client: EC2Client): Ec2Api {
  return {
    describeVolumes: (input) => client.send(new DescribeVolumesCommand(input)),
    describeSnapshots: (input) => client.send(new DescribeSnapshotsCommand(input)),
    createVolume: (input) => client.send(new CreateVolumeCommand(input)),
    attachVolume: (input) => client.send(new AttachVolumeCommand(input)),
    detachVolume: (input) => client.send(new DetachVolumeCommand(input)),
    createTags: (input) => client.send(new CreateTagsCommand(input)),
    deleteTags: (input) => client.send(new DeleteTagsCommand(input)),
    describeTags: (input) => client.send(new DescribeTagsCommand(input)),
    deleteVolume: (input) => client.send(new DeleteVolumeCommand(input)),
    describeVolumeStatus: (input) => client.send(new DescribeVolumeStatusCommand(input)),
  };
}

/** Whether `value` is an SDK client (rather than an Ec2Api already). */
export function isEc2Client(value: EC2Client | Ec2Api): value is EC2Client {
  return value instanceof EC2Client;
}
