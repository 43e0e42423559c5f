/**
 * What the refresh applies its plan through: the adapters, in a module of their own beside run.ts.
 */
import type { Logger } from "../../log.ts";
import type { DockerEngine, ImagePuller, RefreshCloud } from "../ports.ts";
import type { RefreshState } from "./state.ts";

export interface RefreshDeps {
  cloud: Pick<RefreshCloud, "describeVolume" | "tagVolume">;
  engine: Pick<DockerEngine, "images">;
  puller: ImagePuller;
  /** Writes the state (file and metrics) as it changes; never throws. */
  saveState(state: RefreshState): Promise<void>;
  instanceId: string;
  log: Logger;
  now?: () => Date;
}
