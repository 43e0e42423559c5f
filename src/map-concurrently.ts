/**
 * `work` over `items`, at most `limit` at once, the answers in the items' order; the first failure rejects, and no
 * item is begun after it. `work` is told which of the `limit` workers runs it (0 to limit - 1), for what a worker
 * keeps from one item to the next (a read buffer).
 */
export async function mapConcurrently<T, R>(
  items: readonly T[],
  limit: number,
  work: (item: T, worker: number) => Promise<R>,
): Promise<R[]> {
  const answers: R[] = new Array<R>(items.length);
  let next = 0;
  let failed = false;
  const worker = async (_: unknown, id: number) => {
    while (next < items.length && !failed) {
      const index = next++;
      try {
        answers[index] = await work(items[index]!, id);
      } catch (error) {
        failed = true;
        throw error;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return answers;
}
