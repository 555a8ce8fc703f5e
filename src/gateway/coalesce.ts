// Eager passes after a publish or a webhook, coalesced in the gateway. Sixteen webhooks in flight
// asked for sixteen passes over the same consumer, all in one object: they competed for the same
// messages and for the object's one thread, and halved the throughput. A few passes at a time per
// backend, and one more after them for whatever arrived meanwhile, take the same messages; more
// than one, because at a distance a pass takes several round trips, and a webhook that waited
// for the pass before it would wait that long for its runner.

/**
 * Runs `run` at most `limit` times at once per key. A call that finds `limit` runs in flight asks
 * for one more and answers `undefined` at once: the next run to finish starts another round, which
 * takes its work. A caller that starts a run waits for the rounds it leads (`round` 0, then 1, 2,
 * …), and gets the last one's result.
 */
export interface Coalescer<T> {
  run(key: string, run: (round: number) => Promise<T>, opts: CoalesceOptions): Promise<T | undefined>;
  /** Runs in flight, over all keys (for tests). */
  readonly inFlight: number;
}

export interface CoalesceOptions {
  /** No new round starts after this (epoch ms); work asked for later waits for the next trigger. */
  until: number;
  now?: () => number;
}

export function createCoalescer<T>(limit = 1): Coalescer<T> {
  const flights = new Map<string, { running: number; again: boolean }>();
  let inFlight = 0;
  return {
    async run(key, run, { until, now = Date.now }) {
      let flight = flights.get(key);
      if (flight && flight.running >= limit) {
        flight.again = true;
        return undefined;
      }
      if (!flight) flights.set(key, (flight = { running: 0, again: false }));
      flight.running++;
      inFlight++;
      try {
        let round = 0;
        let last = await run(round);
        // No await between this check and the count going down in finally: a caller that found
        // every run busy is always taken by one more round.
        while (flight.again && now() < until) {
          flight.again = false;
          last = await run(++round);
        }
        return last;
      } finally {
        inFlight--;
        if (--flight.running === 0) flights.delete(key);
      }
    },
    get inFlight() {
      return inFlight;
    },
  };
}
