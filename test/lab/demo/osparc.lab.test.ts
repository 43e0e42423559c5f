/**
 * The second lab demo (`npm run lab -- --osparc`, src/lab/demo/osparc.ts) run once: its timeline
 * says what the scenarios (test/lab/machines/osparc-scenarios.lab.test.ts) assert in detail, so its key lines are
 * checked here, and that it leaves no lab behind.
 */
import { existsSync } from "node:fs";
import t from "tap";
import { runOsparcDemo } from "../../../src/lab/demo/osparc.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const lines: string[] = [];
const log = createMemoryLogger("debug");
// The start limit polled every 0.5 s, not osparc's 10 s: each launch would wait for that poll.
// Three, as `npm run lab -- --osparc` makes: the first ids' workspace and the other ids' are made of
// pool volumes (new users start from the pool's stock), and the warm buffer takes the third.
await runOsparcDemo({ pool: "osparc-demo", poolSize: 3, log, out: (line) => lines.push(line), startPollMs: 500 });
const text = lines.join("\n");
const has = (pattern: RegExp, message: string) => t.match(text, pattern, message, { timeline: text });

t.comment(text);
has(
  /RunInstances i-[0-9a-f]+ for user_42 .*: labels tag in [2-9] chunks \(_0, _1/,
  "launched with the labels tag in chunks",
);
has(/phase 1 \(boot --no-docker\): prepared on vol-[0-9a-f]+/, "phase 1 prepared a volume");
has(/phase 2 \(boot --no-claim\): ready on vol-/, "phase 2 ready");
has(/joined; labels copied to the node, labels tag deleted from the instance/, "the tag deleted after the join");
has(/^ +user-id=user_42$/m, "osparc's labels on the node");
has(
  /release \(terminate\): released; vol-[0-9a-f]+ available, expires-at \d{4}-/,
  "terminate: released with an expiry",
);
has(
  /the service's own image user-service:42 \(8 MiB, outside the pool's set\) put on vol-[0-9a-f]+ in [0-9.]+ s/,
  "the first user's service brings an image of its own",
);
has(
  /docker volume "work" on vol-[0-9a-f]+: \/data\/file = written-by-the-first-instance/,
  "and writes into a docker volume",
);
has(
  /service closed: director-v2 removed its docker volumes from the node \(docker volumes left: none\)/,
  "the service's close removes its docker volumes, as osparc does",
);
has(/the same workspace volume vol-[0-9a-f]+ \(workspace\)/, "the same ids get their workspace back");
has(/docker volume "work": gone \(osparc removed it at the close/, "without the service's docker volume");
has(
  /image user-service:42: present, no pull; the workspace saves its [0-9.]+ s here/,
  "with the image the first machine had, and the time it took",
);
has(
  new RegExp(
    String.raw`other ids: volume vol-[0-9a-f]+ \([a-z-]+\), not the workspace of user_42; ` +
      String.raw`docker volumes: none; image user-service:42: absent`,
  ),
  "other ids never get it, nor its image",
);
has(/buffer on vol-[0-9a-f]+ \(pool\)/, "the warm buffer boots on a pool volume");
has(
  /release \(stop\): released; vol-[0-9a-f]+ in-use to i-[0-9a-f]+, expires-at none/,
  "stopped: the volume stays attached, no expiry",
);
has(/phase 1 did not wait for the labels tag/, "the activation's tags land before the boot: no wait");
has(
  /cloud-final \(after multi-user.target\): docker swarm join --availability=drain at/,
  "the join from the user data",
);
has(/in the swarm [0-9.]+ s after LaunchTime/, "the start limit's view: LaunchTime to joined");
has(
  /in the swarm [0-9.]+ s after the LaunchTime its StartInstances set; joined; labels tag deleted/,
  "a warm buffer's activation supervised from its start",
);
has(/AttachVolume requests for i-[0-9a-f]+ since StartInstances: 0 \(volume kept\)/, "0 AttachVolume on the start");
t.match(lines.at(-1), /lab +down$/, "the lab is torn down");
const root = /lab root (\S+)/.exec(text)?.[1];
t.ok(root && !existsSync(root), "its root is gone", { root });
