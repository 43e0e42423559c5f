/**
 * The real-systemd boot on docker 20.10 and 26 (what is checked: nspawn-machines.ts): systemd boots
 * the agent before docker, docker runs on the volume, poweroff releases it; phase 1 failing after
 * the attach; osparc's join waiting for docker on the volume. Docker 28 and the containerd store:
 * nspawn-containerd.lab.test.ts.
 */
import { nspawnBootTests } from "./nspawn-machines.ts";

nspawnBootTests("systemd");
