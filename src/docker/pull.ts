/**
 * Pulling images through the host's dockerd with the docker CLI (`docker pull`), run with an
 * argument array through src/exec.ts. The CLI rather than the API's `POST /images/create`: it
 * brings the registry credentials the host is set up with (`docker login`, credential helpers
 * such as ECR's), which the agent must not learn to read. Stopping the CLI (timeout, SIGTERM)
 * closes its request, and dockerd cancels the pull.
 */
import type { ImagePuller } from "../agent/ports.ts";
import { AgentError } from "../errors.ts";
import { run } from "../exec.ts";
import { validateImageRef } from "../inputs.ts";
import type { Logger } from "../log.ts";

export interface ImagePullerOptions {
  /** The docker API socket, `unix:///…` (config paths.dockerHost). */
  host: string;
  /** The docker CLI (default `docker` on PATH). */
  docker?: string;
  log?: Logger;
}

/** A puller over `docker --host <host> pull`. */
export function createImagePuller(options: ImagePullerOptions): ImagePuller {
  const docker = options.docker ?? "docker";
  const log = options.log;
  return {
    async pull(image, { timeoutMs, signal }) {
      const check = validateImageRef(image);
      if (!check.ok)
        throw new AgentError(
          check.problem,
          "fix the image list (the snapshot's ebs-cache:images tag or the pre_pulled_images instance tag)",
        );
      const result = await run(docker, ["--host", options.host, "pull", "--quiet", check.value], {
        check: false,
        timeoutMs,
        signal,
        log,
      });
      if (result.exitCode !== 0) {
        throw new AgentError(
          `docker pull ${check.value} exited with ${result.exitCode}: ` +
            `${(result.stderr || result.stdout).trim().split("\n").slice(-2).join(" ")}`,
          "check that the registry answers and that this host is logged in to it (docker login, or its " +
            "credential helper)",
        );
      }
      const inspected = await run(
        docker,
        ["--host", options.host, "image", "inspect", "--format", "{{.Size}}", check.value],
        { check: false, timeoutMs: 30_000, log },
      );
      const bytes = Number(inspected.stdout.trim());
      return inspected.exitCode === 0 && Number.isSafeInteger(bytes) ? { bytes } : {};
    },
  };
}
