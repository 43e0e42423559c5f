/**
 * Which label prefixes the agent may own: none that reaches a label osparc's autoscaler or docker
 * owns, or one another system sets. A base module of its own: the configuration checks a prefix
 * when it is loaded, and the label writer (src/docker/labels.ts) before it publishes under it.
 */

/** Lower-case dotted words (`io.simcore.ebs-cache`): docker's recommended key shape. */
const PREFIX = /^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$/;
/** Long enough for any real prefix, short enough that `<prefix>.workspace.product-name` fits a key. */
const MAX_PREFIX = 128;

/**
 * Node labels osparc's autoscaler owns (`utils/utils_docker.py`, `models_library/docker.py`):
 * its readiness and lifecycle labels, the instance type, and the plain placement keys it copies
 * from the labels tag on activation and removes on drain. The agent never writes, changes or
 * removes them, and no prefix may equal, contain or lie above one of them.
 */
export const OSPARC_LABELS: readonly string[] = [
  "io.simcore.osparc-services-ready",
  "io.simcore.osparc-services-ready-last-changed",
  "io.simcore.osparc-node-found-empty",
  "io.simcore.osparc-node-termination-started",
  "ec2-instance-type",
  "product-name",
  "user-id",
  "project-id",
  "node-id",
  "wallet-id",
];

/**
 * Namespaces a prefix may neither enter nor lie above: docker reserves three for itself
 * (docs.docker.com, "Docker object labels"), and osparc names its node labels `io.simcore.osparc-…`
 * (new ones have been added over time).
 */
export const RESERVED_NAMESPACES: readonly { namespace: string; owner: string }[] = [
  { namespace: "com.docker.", owner: "docker" },
  { namespace: "io.docker.", owner: "docker" },
  { namespace: "org.dockerproject.", owner: "docker" },
  { namespace: "io.simcore.osparc-", owner: "osparc's autoscaler" },
];

/**
 * Every reason `prefix` cannot be the agent's, empty when it can. `protectedKeys` are more labels
 * other systems set on these nodes (osparc's `NODES_MONITORING_*` lists, `custom_node_labels`):
 * the agent removes keys under its prefix that it no longer publishes, so a prefix above one of
 * them would fight its owner, and a prefix equal to or holding one would confuse every reader.
 */
export function labelPrefixProblems(prefix: string, protectedKeys: readonly string[] = []): string[] {
  const shown = JSON.stringify(prefix);
  if (prefix === "") return ["label prefix is empty: the agent would own every label (use e.g. io.simcore.ebs-cache)"];
  if (!PREFIX.test(prefix) || prefix.length > MAX_PREFIX) {
    return [
      `label prefix ${shown} is not lower-case dotted words of at most ${MAX_PREFIX} characters (e.g. ` +
        `io.simcore.ebs-cache)`,
    ];
  }
  const problems: string[] = [];
  const clashing: string[] = [];
  for (const { namespace, owner } of RESERVED_NAMESPACES) {
    const stem = namespace.replace(/[.-]$/, "");
    if (prefix === stem || prefix.startsWith(namespace))
      problems.push(`label prefix ${shown} lies in ${namespace}*, which ${owner} reserves`);
    else if (namespace.startsWith(prefix))
      problems.push(
        `label prefix ${shown} lies above ${namespace}*, which ${owner} reserves: the agent would remove labels there`,
      );
    else continue;
    clashing.push(namespace);
  }
  const osparc = new Set(OSPARC_LABELS);
  const keys = [...OSPARC_LABELS, ...protectedKeys.filter((key) => !osparc.has(key))];
  for (const key of keys) {
    const owner = osparc.has(key) ? "osparc's autoscaler" : "another system (labels.protectedKeys)";
    const relation = prefixRelation(prefix, key);
    if (!relation) continue;
    // "lies above" a key of a namespace already named adds nothing to that line.
    if (relation !== "equals" && relation !== "contains" && clashing.some((namespace) => key.startsWith(namespace)))
      continue;
    problems.push(`label prefix ${shown} ${relation} ${key}, a label ${owner} sets`);
  }
  return problems;
}

/** How a prefix collides with a key owned by someone else, or undefined when it does not. */
function prefixRelation(prefix: string, key: string): string | undefined {
  if (prefix === key) return "equals";
  // `io.simcore` above `io.simcore.osparc-services-ready`; `node` would read as `node-id`'s family.
  if (key.startsWith(`${prefix}.`)) return "lies above";
  if (key.startsWith(prefix)) return "is the start of";
  // `user-id.cache` or `acme.user-id`: the owned name as whole dotted words inside the prefix.
  if (`.${prefix}.`.includes(`.${key}.`)) return "contains";
  return undefined;
}
