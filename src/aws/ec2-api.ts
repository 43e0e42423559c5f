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
  DescribeInstancesCommand,
  DescribeVolumesCommand,
  DescribeVolumeStatusCommand,
  DetachVolumeCommand,
  EC2Client,
  paginateDescribeSnapshots,
  paginateDescribeVolumes,
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
  type DescribeInstancesCommandInput,
  type DescribeInstancesCommandOutput,
  type DescribeSnapshotsCommandInput,
  type DescribeSnapshotsCommandOutput,
  type DescribeVolumesCommandInput,
  type DescribeVolumesCommandOutput,
  type DescribeVolumeStatusCommandInput,
  type DescribeVolumeStatusCommandOutput,
  type DetachVolumeCommandInput,
  type DetachVolumeCommandOutput,
} from "@aws-sdk/client-ec2";

/** Per call: cancellation (systemd's SIGTERM) reaches the HTTP request and the SDK's retry waits. */
export interface CallOptions {
  signal?: AbortSignal;
}

/** The EC2 actions the agent uses. */
export interface Ec2Api {
  describeVolumes(input: DescribeVolumesCommandInput, options?: CallOptions): Promise<DescribeVolumesCommandOutput>;
  /** Every page of a DescribeVolumes listing, following NextToken (the SDK's paginator). */
  describeVolumesPages(
    input: DescribeVolumesCommandInput,
    options?: CallOptions,
  ): AsyncIterable<DescribeVolumesCommandOutput>;
  /** The instance's tags, state and EBS mappings in one call (identity and reboot checks). */
  describeInstances(
    input: DescribeInstancesCommandInput,
    options?: CallOptions,
  ): Promise<DescribeInstancesCommandOutput>;
  /** Every page of a DescribeSnapshots listing, following NextToken (the SDK's paginator). */
  describeSnapshotsPages(
    input: DescribeSnapshotsCommandInput,
    options?: CallOptions,
  ): AsyncIterable<DescribeSnapshotsCommandOutput>;
  createVolume(input: CreateVolumeCommandInput, options?: CallOptions): Promise<CreateVolumeCommandOutput>;
  attachVolume(input: AttachVolumeCommandInput, options?: CallOptions): Promise<AttachVolumeCommandOutput>;
  detachVolume(input: DetachVolumeCommandInput, options?: CallOptions): Promise<DetachVolumeCommandOutput>;
  createTags(input: CreateTagsCommandInput, options?: CallOptions): Promise<CreateTagsCommandOutput>;
  deleteTags(input: DeleteTagsCommandInput, options?: CallOptions): Promise<DeleteTagsCommandOutput>;
  deleteVolume(input: DeleteVolumeCommandInput, options?: CallOptions): Promise<DeleteVolumeCommandOutput>;
  describeVolumeStatus(
    input: DescribeVolumeStatusCommandInput,
    options?: CallOptions,
  ): Promise<DescribeVolumeStatusCommandOutput>;
}

/** The interface over a real SDK client (its retry strategy applies to every call). */
export function sdkEc2Api(client: EC2Client): Ec2Api {
  return {
    describeVolumes: (input, options) => client.send(new DescribeVolumesCommand(input), sendOptions(options)),
    describeInstances: (input, options) => client.send(new DescribeInstancesCommand(input), sendOptions(options)),
    // The paginator hands its extra arguments to client.send: cancellation reaches every page.
    describeVolumesPages: (input, options) => paginateDescribeVolumes({ client }, { ...input }, sendOptions(options)),
    describeSnapshotsPages: (input, options) =>
      paginateDescribeSnapshots({ client }, { ...input }, sendOptions(options)),
    createVolume: (input, options) => client.send(new CreateVolumeCommand(input), sendOptions(options)),
    attachVolume: (input, options) => client.send(new AttachVolumeCommand(input), sendOptions(options)),
    detachVolume: (input, options) => client.send(new DetachVolumeCommand(input), sendOptions(options)),
    createTags: (input, options) => client.send(new CreateTagsCommand(input), sendOptions(options)),
    deleteTags: (input, options) => client.send(new DeleteTagsCommand(input), sendOptions(options)),
    deleteVolume: (input, options) => client.send(new DeleteVolumeCommand(input), sendOptions(options)),
    describeVolumeStatus: (input, options) => client.send(new DescribeVolumeStatusCommand(input), sendOptions(options)),
  };
}

function sendOptions(options: CallOptions | undefined) {
  return options?.signal ? { abortSignal: options.signal } : {};
}

/** Whether `value` is an SDK client (rather than an Ec2Api already). */
export function isEc2Client(value: EC2Client | Ec2Api): value is EC2Client {
  return value instanceof EC2Client;
}
