/**
 * The errors the emulator answers with. Each carries the EC2 error code (which the SDK turns
 * into the exception's `name` and the CLI prints) and the HTTP status EC2 uses for it.
 */

export class Ec2Error extends Error {
  readonly code: string;
  /** 400 for client errors; 503 for throttling, 500 for internal errors, 412 for DryRun. */
  readonly status: number;

  constructor(code: string, message: string, status = 400) {
    super(message);
    this.code = code;
    this.status = status;
    this.name = "Ec2Error";
  }
}

/** A required parameter was not given. */
export function missingParameter(name: string): Ec2Error {
  return new Ec2Error("MissingParameter", `The request must contain the parameter ${name}`);
}

/** A parameter's value was out of range or of the wrong form. */
export function invalidValue(name: string, value: string, why?: string): Ec2Error {
  return new Ec2Error(
    "InvalidParameterValue",
    `Value (${value}) for parameter ${name} is invalid.${why ? ` ${why}` : ""}`,
  );
}

/** What EC2 answers when a throttling fault fires (HTTP 503, retried by SDK and CLI). */
export function throttled(): Ec2Error {
  return new Ec2Error("RequestLimitExceeded", "Request limit exceeded.", 503);
}

/** The 500 that EC2 gives for its own failures (also used by the applyThen500 fault). */
export function internalError(): Ec2Error {
  return new Ec2Error("InternalError", "An internal error has occurred", 500);
}
