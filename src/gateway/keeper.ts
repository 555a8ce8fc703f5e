// One NATS connection kept across requests (inside the gateway Durable Object): opened on first
// use, to any server of NATS_URL; watched by pings and by the calls that use it; replaced as soon
// as it is found dead. The calls that were on it are retried once on the new one, when that is
// safe and time is left; nothing waits past its deadline.
import { bounded, deadlineFor, NatsUnavailable, openNats, type KeepAlive, type NatsHandle, type NatsSettings } from "../nats/connection.ts";

/** Pings while idle: a silent socket closes itself after about pingIntervalMs × (maxPingOut + 1). */
export const KEEP_ALIVE: KeepAlive = { pingIntervalMs: 1_000, maxPingOut: 2 };
/** Servers that do not answer a connect within this are given up (the calls waiting are bounded anyway). */
export const CONNECT_TIMEOUT_MS = 2_000;
/** A call still pending after this makes the keeper ping its connection. */
export const SUSPECT_AFTER_MS = 750;
/** A connection that does not answer a ping within this is replaced. */
export const PING_BOUND_MS = 500;

export interface RunOptions {
  /** Epoch ms after which the call is given up (answered Unavailable). */
  deadline: number;
  /** Run once more on a new connection when the first broke under the call (idempotent calls). */
  retry: boolean;
}

/**
 * A warm connection and its replacement policy. `run` hands calls a live connection and bounds
 * them; `opened` counts connections opened (for the bench and tests).
 */
export interface ConnectionKeeper {
  run<T>(fn: (handle: NatsHandle) => Promise<T>, opts: RunOptions): Promise<T>;
  readonly opened: number;
  readonly lastUsed: number;
  close(): Promise<void>;
}

export function createKeeper(settings: NatsSettings, name: string, now: () => number = Date.now): ConnectionKeeper {
  let current: Promise<NatsHandle> | undefined;
  let opened = 0;
  let lastUsed = now();
  const checking = new WeakMap<NatsHandle, Promise<void>>();

  const discard = (handle: NatsHandle) => {
    void current?.then(
      (h) => h === handle && (current = undefined),
      () => undefined,
    );
    if (!handle.nc.isClosed()) void handle.nc.close().catch(() => undefined);
  };
  const acquire = (): Promise<NatsHandle> => {
    if (current) return current;
    const opening = openNats(settings, name, { keepAlive: KEEP_ALIVE, connectTimeoutMs: CONNECT_TIMEOUT_MS }).then((handle) => {
      opened++;
      // Closed by the server, a stale ping or a discard: the next call opens a new one.
      void handle.nc.closed().then(() => current === opening && (current = undefined));
      return handle;
    });
    opening.catch(() => current === opening && (current = undefined));
    current = opening;
    return opening;
  };
  /** One ping at a time per connection; no answer within PING_BOUND_MS and it goes. */
  const suspect = (handle: NatsHandle) => {
    if (handle.nc.isClosed() || checking.has(handle)) return;
    checking.set(
      handle,
      bounded(handle.nc, "gateway ping", handle.nc.flush(), PING_BOUND_MS).then(
        () => void checking.delete(handle),
        () => discard(handle),
      ),
    );
  };

  const attempt = async <T>(fn: (handle: NatsHandle) => Promise<T>, deadline: number, used: NatsHandle[]): Promise<T> => {
    const left = () => Math.max(0, deadline - now());
    const handle = await deadlineFor(acquire(), left(), "no NATS connection within the call's deadline");
    used.push(handle);
    const watch = setTimeout(() => suspect(handle), Math.min(SUSPECT_AFTER_MS, left()));
    try {
      return await deadlineFor(fn(handle), left(), "NATS did not answer within the call's deadline");
    } finally {
      clearTimeout(watch);
    }
  };

  return {
    get opened() {
      return opened;
    },
    get lastUsed() {
      return lastUsed;
    },
    async run(fn, { deadline, retry }) {
      lastUsed = now();
      const used: NatsHandle[] = [];
      try {
        return await attempt(fn, deadline, used);
      } catch (err) {
        const broke = used[0]?.nc.isClosed() ?? false;
        if (used[0] && err instanceof NatsUnavailable && !broke) suspect(used[0]);
        if (!retry || !broke || deadline - now() < MIN_RETRY_MS) throw err;
        return attempt(fn, deadline, used);
      }
    },
    async close() {
      const handle = await current?.catch(() => undefined);
      current = undefined;
      if (handle && !handle.nc.isClosed()) await handle.nc.close().catch(() => undefined);
    },
  };
}

/** Less than this left: a retry could not finish, so the call fails at once instead. */
const MIN_RETRY_MS = 100;
