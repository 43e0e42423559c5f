/**
 * The EC2 error table's remediations: a refusal by EC2 is EC2's answer to our request, never the
 * agent's bug; an unclassified 4xx points at EC2's own code and message and at what to correct.
 */
import t from "tap";
import { classifyEc2Error, Ec2CallError, type Ec2Fault } from "../../src/aws/errors.ts";

const sdkError = (name: string, message: string, status?: number) =>
  Object.assign(new Error(message), {
    name,
    ...(status !== undefined ? { $metadata: { httpStatusCode: status } } : {}),
  });

t.test("an unclassified 4xx: EC2's code and message named, the value to correct, no bug report", async (t) => {
  const refused = sdkError(
    "InvalidParameterValue",
    "Value (gp9) for parameter volumeType is invalid. Allowed values are [standard, io1, io2, gp2, sc1, st1, gp3]",
    400,
  );
  const failure = classifyEc2Error(refused);
  t.equal(failure.kind, "invalid-request");
  const error = new Ec2CallError("CreateVolume", failure, refused);
  t.match(error.message, /^EC2 CreateVolume failed: InvalidParameterValue: Value \(gp9\) for parameter volumeType/);
  t.notMatch(error.remediation, /bug/, "EC2 refusing our request is not the agent's bug");
  t.match(error.remediation, /EC2 refused CreateVolume \(InvalidParameterValue\)/, "names the call and EC2's code");
  t.match(error.remediation, /configuration|tag/, "points at where a named value comes from");
  t.notMatch(error.remediation, /\n/, "one line");
});

t.test("no kind of the table tells an EC2 failure as the agent's bug", async (t) => {
  const answers: [Error, Ec2Fault][] = [
    [sdkError("InvalidVolume.NotFound", "The volume 'vol-1' does not exist.", 400), "not-found"],
    [sdkError("InvalidAttachment.NotFound", "no attachment", 400), "attachment-not-found"],
    [sdkError("VolumeInUse", "vol-1 is already attached to an instance", 400), "volume-in-use"],
    [sdkError("IncorrectState", "vol-1 is 'creating'", 400), "incorrect-state"],
    [sdkError("InvalidVolume.ZoneMismatch", "not in the same availability zone", 400), "zone-mismatch"],
    [sdkError("InvalidParameterValue", "Attachment point /dev/sdf is already in use", 400), "device-in-use"],
    [sdkError("InvalidParameterValue", "Value (/dev/xx) for parameter device is invalid", 400), "invalid-device"],
    [sdkError("AttachmentLimitExceeded", "limit", 400), "attachment-limit"],
    [sdkError("IncorrectInstanceState", "stopping", 400), "instance-state"],
    [sdkError("RequestLimitExceeded", "slow down", 503), "throttled"],
    [sdkError("RequestExpired", "expired", 400), "clock"],
    [sdkError("UnauthorizedOperation", "not authorized", 403), "unauthorized"],
    [sdkError("CredentialsProviderError", "no credentials"), "credentials-unavailable"],
    [sdkError("InternalError", "oops", 500), "server"],
    [Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }), "network"],
    [sdkError("MissingParameter", "The request must contain the parameter size", 400), "invalid-request"],
    [sdkError("InvalidParameterCombination", "iops with gp2", 400), "invalid-request"],
    [sdkError("UnknownVolumeType", "gp9", 400), "invalid-request"],
  ];
  for (const [answer, kind] of answers) {
    const failure = classifyEc2Error(answer);
    t.equal(failure.kind, kind, `${failure.code}: ${kind}`);
    const error = new Ec2CallError("AttachVolume", failure, answer);
    t.notMatch(error.remediation, /bug/, `${failure.code}: not the agent's bug`);
    t.ok(error.remediation.length > 0, `${failure.code}: a remediation`);
  }
});
