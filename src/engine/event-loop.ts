/** Lets other work (I/O callbacks, other requests' pushes) run before continuing. */
export const yieldToEventLoop = (): Promise<void> =>
  new Promise((resolve) => (typeof setImmediate === 'function' ? setImmediate(resolve) : setTimeout(resolve, 0)));
