/** Image references as `docker images` lists them: the one spelling two references of one image compare by. */

/** An image reference as docker lists it: `:latest` added when it names no tag or digest. */
export function withLatest(image: string): string {
  return /:[^/]+$/.test(image) || image.includes("@") ? image : `${image}:latest`;
}

/**
 * A reference as `docker images` lists it: Docker Hub's implicit parts dropped
 * (`docker.io/library/redis` → `redis`, `index.docker.io/org/app` → `org/app`) and `:latest` added
 * when it names no tag or digest. Two spellings of one image then compare equal.
 */
export function asListed(image: string): string {
  const slash = image.indexOf("/");
  const first = slash < 0 ? "" : image.slice(0, slash);
  const hasRegistry = first.includes(".") || first.includes(":") || first === "localhost";
  let ref = image;
  if (hasRegistry && DOCKER_HUB.has(first)) ref = image.slice(slash + 1);
  else if (hasRegistry) return withLatest(image);
  // Docker Hub's official images live under `library/`, which docker does not show.
  if (/^library\/[^/:@]+(?:[:@].*)?$/.test(ref)) ref = ref.slice("library/".length);
  return withLatest(ref);
}

const DOCKER_HUB = new Set(["docker.io", "index.docker.io", "registry-1.docker.io"]);
