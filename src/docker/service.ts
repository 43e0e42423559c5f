/**
 * docker.service through systemctl, for a real host. (The lab's private dockerd has its own
 * service control, src/lab/docker/dockerd.ts dockerdService(); the agent takes either as DockerService.)
 */
import type { DockerService } from "../agent/ports.ts";
import { AgentError, describeError } from "../errors.ts";
import { run } from "../exec.ts";
import type { Logger } from "../log.ts";

/** systemctl could not start, stop, restart or reload docker. */
export class DockerServiceError extends AgentError {
  readonly unit: string;
  readonly action: string;

  constructor(unit: string, action: string, message: string, remediation: string, options?: { cause?: unknown }) {
    super(message, remediation, undefined, options);
    this.unit = unit;
    this.action = action;
  }
}

export interface SystemdDockerServiceOptions {
  /** The unit; default `docker.service`. */
  unit?: string;
  log?: Logger;
  /** The systemctl binary (default `systemctl` on PATH); tests point it at a stand-in. */
  systemctl?: string;
  /** Bounds one systemctl call (default 5 min: stopping docker waits for its containers). */
  timeoutMs?: number;
}

const UNIT = /^[A-Za-z0-9][A-Za-z0-9@_.:\\-]*$/;

/** `systemctl start|stop|restart|reload|is-active <unit>`. */
export function createSystemdDockerService(options: SystemdDockerServiceOptions = {}): DockerService {
  const unit = options.unit ?? "docker.service";
  if (!UNIT.test(unit)) {
    throw new DockerServiceError(
      unit,
      "configure",
      `${JSON.stringify(unit)} is not a systemd unit name`,
      "fix the docker unit name in the config",
    );
  }
  const systemctl = options.systemctl ?? "systemctl";
  const timeoutMs = options.timeoutMs ?? 5 * 60_000;

  function systemctlRun(action: string, args: string[]) {
    return run(systemctl, args, { check: false, log: options.log, timeoutMs }).catch((cause: unknown) => {
      throw new DockerServiceError(
        unit,
        action,
        `could not run ${systemctl} ${args.join(" ")}: ${describeError(cause)}`,
        "check that systemd runs this host",
        {
          cause,
        },
      );
    });
  }

  async function act(action: "start" | "stop" | "restart" | "reload"): Promise<void> {
    options.log?.info("docker.service", `${action} ${unit}`, { unit });
    const result = await systemctlRun(action, [action, unit]);
    if (result.exitCode !== 0) {
      const detail = (result.stderr || result.stdout).trim().split("\n").slice(-3).join(" | ");
      throw new DockerServiceError(
        unit,
        action,
        `systemctl ${action} ${unit} exited with ${result.exitCode}${detail ? `: ${detail}` : ""}`,
        `see why: journalctl -u ${unit} -n 100 --no-pager; systemctl status ${unit}`,
      );
    }
  }

  return {
    start: () => act("start"),
    stop: () => act("stop"),
    restart: () => act("restart"),
    reload: () => act("reload"),
    async isActive() {
      // is-active exits 0 when active, 3 when inactive or failed, 4 for an unknown unit.
      const result = await systemctlRun("is-active", ["is-active", "--quiet", unit]);
      return result.exitCode === 0;
    },
  };
}

/**
 * The version of the installed dockerd (`dockerd --version`: "Docker version 29.0.1, build …"),
 * read without a running daemon: the agent switches the data-root before docker starts, and
 * docker 29+ needs `features.containerd-snapshotter: false` to keep the graphdriver image store.
 */
export async function installedDockerdVersion(options: { dockerd?: string; log?: Logger } = {}): Promise<string> {
  const dockerd = options.dockerd ?? "dockerd";
  const env = { PATH: `${process.env.PATH ?? ""}:/usr/sbin:/usr/bin:/sbin:/bin` };
  const result = await run(dockerd, ["--version"], { check: false, log: options.log, env, timeoutMs: 30_000 }).catch(
    (cause: unknown) => {
      throw new DockerServiceError(
        "dockerd",
        "version",
        `could not run ${dockerd} --version`,
        "install docker (docker-ce or docker.io)",
        {
          cause,
        },
      );
    },
  );
  const version = /version ([0-9][^\s,]*)/i.exec(result.stdout)?.[1];
  if (result.exitCode !== 0 || version === undefined) {
    throw new DockerServiceError(
      "dockerd",
      "version",
      `${dockerd} --version did not print a version: ${(result.stdout || result.stderr).trim().slice(0, 200)}`,
      "check the docker installation",
    );
  }
  return version;
}

/**
 * The installed dockerd's version for the life of a command: it does not change during a run, so
 * `dockerd --version` (~0.1 s) runs once for the host's store, the pre-claim check and the
 * data-root switch alike. A failed read is not remembered.
 */
export function createDockerdVersion(options: { log?: Logger } = {}): () => Promise<string | undefined> {
  let version: Promise<string | undefined> | undefined;
  return () => {
    version ??= installedDockerdVersion(options);
    version.catch(() => (version = undefined));
    return version;
  };
}
