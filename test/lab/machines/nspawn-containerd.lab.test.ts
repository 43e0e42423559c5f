/**
 * The real-systemd boot on docker 28 (what is checked: nspawn-machines.ts): booted, rebooted,
 * powered off and its volume taken by a second instance; the containerd image store, without the
 * agent and through it. Docker 20.10 and 26: nspawn-boot.lab.test.ts.
 */
import { nspawnBootTests } from "./nspawn-machines.ts";

nspawnBootTests("docker-28");
