/**
 * `work`, or a rejection with `onTimeout()` once `ms` have passed without it settling. The timer is cleared
 * as soon as `work` settles and never keeps a Node process alive on its own.
 */
export function withDeadline<T>(work: Promise<T>, ms: number, onTimeout: () => unknown): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(onTimeout()), ms);
    (timer as { unref?: () => void }).unref?.();
    work.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
