/**
 * A queue of async steps run one at a time, each once every step begun
 * before it has settled (a failed step does not stop the ones after it).
 */
export type OneAtATime = <T>(step: () => Promise<T>) => Promise<T>;

export function oneAtATime(): OneAtATime {
  let queue: Promise<unknown> = Promise.resolve();
  return <T>(step: () => Promise<T>): Promise<T> => {
    const run = queue.then(step, step);
    queue = run.catch(() => undefined);
    return run;
  };
}
