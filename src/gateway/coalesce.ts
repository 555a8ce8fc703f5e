// Eager passes after a publish or a webhook, coalesced in the gateway. Sixteen webhooks in flight
// asked for sixteen passes over the same consumer, all in one object: they competed for the same
// messages and for the object's one thread, and halved the throughput. One pass at a time per
// backend, with one more after it for whatever arrived meanwhile, takes the same messages.

/**
 * Runs `run` at most once at a time per key. A call that arrives while it runs asks for one more
 * run after it and answers `undefined` at once: the run after it takes its work. The first caller
 * waits for the runs it leads (`round` 0, then 1, 2, …), and gets the last one's result.
 */
export interface Coalescer<T> {
  run(key: string, run: (round: number) => Promise<T>, opts: CoalesceOptions): Promise<T | undefined>;
  /** Keys with a run in flight (for tests). */
  readonly inFlight: number;
}

export interface CoalesceOptions {
  /** No new run starts after this (epoch ms); work asked for later waits for the next trigger. */
  until: number;
  now?: () => number;
}

export function createCoalescer<T>(): Coalescer<T> {
  const flights = new Map<string, { again: boolean }>();
  return {
    async run(key, run, { until, now = Date.now }) {
      const current = flights.get(key);
      if (current) {
        current.again = true;
        return undefined;
      }
      const flight = { again: false };
      flights.set(key, flight);
      try {
        let round = 0;
        let last = await run(round);
        // No await between this check and the delete in finally: a caller that finds the flight
        // still in the map is always taken by one more run.
        while (flight.again && now() < until) {
          flight.again = false;
          last = await run(++round);
        }
        return last;
      } finally {
        flights.delete(key);
      }
    },
    get inFlight() {
      return flights.size;
    },
  };
}
