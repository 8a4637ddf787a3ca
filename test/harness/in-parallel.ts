/** Runs `work` over `items` with at most `inFlight` at once; the results in the order of the items. */
export async function inParallel<T, R>(items: readonly T[], inFlight: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(inFlight, items.length) }, async () => {
      for (let i = next++; i < items.length; i = next++) out[i] = await work(items[i]);
    }),
  );
  return out;
}
