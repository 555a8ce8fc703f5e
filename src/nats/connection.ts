// Opens NATS connections. Outside a Durable Object a connection belongs to the invocation that
// opened it (withNats drains it in `finally`); the gateway (src/gateway/) keeps one with KeepAlive.
import { credsAuthenticator, errors, wsconnect, type NatsConnection } from "@nats-io/nats-core";
import { jetstream, JetStreamApiError, JetStreamError, type JetStreamClient } from "@nats-io/jetstream";

export interface NatsHandle {
  nc: NatsConnection;
  js: JetStreamClient;
}

/** How to reach NATS (NATS_URL and one of its auth methods), as config.ts reads it. */
export interface NatsSettings {
  natsServers: string[];
  natsAuth: NatsAuth;
}

export type NatsAuth =
  { kind: "none" } | { kind: "token"; token: string } | { kind: "userpass"; user: string; pass: string } | { kind: "creds"; creds: string };

const CONNECT_TIMEOUT_MS = 5_000;
export const REQUEST_TIMEOUT_MS = 5_000;

/**
 * Connects to one of `natsServers`, trying each in turn (from a random one, to spread
 * invocations over a cluster) until one answers, within `connectTimeoutMs` in all. nats.js with
 * reconnect off gives up after the first server that refuses, so the failover is ours.
 */
export async function openNats(
  settings: NatsSettings,
  name = "gitea-edge-dispatcher",
  { keepAlive, connectTimeoutMs = CONNECT_TIMEOUT_MS }: OpenOptions = {},
): Promise<NatsHandle> {
  const urls = settings.natsServers;
  const deadline = Date.now() + connectTimeoutMs;
  const perServer = Math.max(MIN_CONNECT_ATTEMPT_MS, Math.floor(connectTimeoutMs / urls.length));
  const first = Math.floor(Math.random() * urls.length);
  const failures: string[] = [];
  for (let i = 0; i < urls.length; i++) {
    const left = deadline - Date.now();
    if (left <= 0) break;
    const attempt = wsconnect({
      servers: [urls[(first + i) % urls.length]!],
      name,
      timeout: Math.min(perServer, left),
      // One invocation is short-lived: a broken connection is an error for this invocation, not a
      // reason to wait around for the server.
      reconnect: false,
      maxReconnectAttempts: 0,
      // Otherwise every request builds an Error up front for its stack: a tenth of the Worker's CPU
      // under load (profiled). Errors still carry their own stack and cause.
      noAsyncTraces: true,
      ...(keepAlive ? { pingInterval: keepAlive.pingIntervalMs, maxPingOut: keepAlive.maxPingOut } : {}),
      ...authOptions(settings.natsAuth),
    });
    try {
      // nats.js's timeout does not cover a WebSocket upgrade that is never answered.
      const nc = await deadlineFor(attempt, Math.min(perServer, left));
      return { nc, js: jetstream(nc, { timeout: REQUEST_TIMEOUT_MS, checkAPI: false }) };
    } catch (err) {
      void attempt.then(
        (late) => late.close(),
        () => undefined,
      );
      // Auth refusals are the same on every server of a cluster: no point in trying the others.
      if (err instanceof errors.AuthorizationError || err instanceof errors.UserAuthenticationExpiredError) throw authRefused(settings.natsAuth, err);
      failures.push((err as Error).name);
    }
  }
  // Names only: a URL may carry credentials.
  throw new NatsUnavailable(`no NATS server answered (${failures.length} of ${urls.length} tried: ${failures.join(", ") || "out of time"})`);
}

const MIN_CONNECT_ATTEMPT_MS = 1_000;

export interface OpenOptions {
  /** For a connection kept across requests. */
  keepAlive?: KeepAlive;
  /** All servers tried within this (default 5 s). */
  connectTimeoutMs?: number;
}

/** A connection kept across requests pings, and closes itself once `maxPingOut` pings go unanswered. */
export interface KeepAlive {
  pingIntervalMs: number;
  maxPingOut: number;
}

/** Settles with `work`, or rejects with NatsUnavailable(`message`) once `ms` pass. */
export async function deadlineFor<T>(work: Promise<T>, ms: number, message = `no answer in ${ms} ms`): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new NatsUnavailable(message)), ms)));
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}

function authOptions(auth: NatsAuth) {
  switch (auth.kind) {
    case "none":
      return {};
    case "token":
      return { token: auth.token };
    case "userpass":
      return { user: auth.user, pass: auth.pass };
    case "creds":
      return { authenticator: credsAuthenticator(new TextEncoder().encode(auth.creds)) };
  }
}

const DRAIN_TIMEOUT_MS = 2_000;

/** NATS refused the credentials: the message names the variables that hold them, never their values. */
export class NatsAuthRefused extends Error {
  override readonly name = "NatsAuthRefused";
}

function authRefused(auth: NatsAuth, err: Error): NatsAuthRefused {
  const expired = err instanceof errors.UserAuthenticationExpiredError;
  const which = {
    none: "no credentials were given: set NATS_TOKEN, NATS_USER + NATS_PASS, or NATS_CREDS",
    token: "check NATS_TOKEN",
    userpass: "check NATS_USER and NATS_PASS",
    creds: expired ? "the user JWT in NATS_CREDS has expired: issue a new creds file" : "check NATS_CREDS (its user JWT and seed)",
  }[auth.kind];
  return new NatsAuthRefused(`NATS refused the credentials (${expired ? "authentication expired" : "authorization violation"}): ${which}`);
}

/** NATS could not be reached or did not answer in time; nothing about the data is known. */
export class NatsUnavailable extends Error {
  override readonly name = "NatsUnavailable";
}

const UNAVAILABLE = [
  errors.ClosedConnectionError,
  errors.ConnectionError,
  errors.DrainingConnectionError,
  errors.NoRespondersError,
  errors.RequestError,
  errors.TimeoutError,
  NatsUnavailable,
];

/** True for errors that say NATS is unreachable or slow, as opposed to refusing a request. By type. */
export function isNatsUnavailable(err: unknown): boolean {
  return UNAVAILABLE.some((type) => err instanceof type) || isJetStreamNotEnabled(err);
}

/**
 * What JetStream requests answer when nobody responds (a stream without a leader, say). Its class
 * is exported from @nats-io/jetstream's internal entry only, so it is known by the name nats.js
 * gives it (jserrors.ts), not imported from there.
 */
const isJetStreamNotEnabled = (err: unknown) => err instanceof Error && err.name === "JetStreamNotEnabled";

/**
 * Any error of the NATS client or of JetStream (no responders, no leader during an election, a
 * timeout, a closed connection): by type, never by message. The domain handles the refusals it
 * expects (a lost compare-and-set, a missing key); what reaches the HTTP layer is NATS trouble.
 */
export function isNatsError(err: unknown): boolean {
  return (
    isNatsUnavailable(err) ||
    err instanceof NatsAuthRefused ||
    err instanceof JetStreamError ||
    err instanceof JetStreamApiError ||
    Object.values(errors).some((type) => err instanceof type)
  );
}

/**
 * Settles with `work`, or rejects once `ms` pass or the connection closes. For the few nats.js
 * calls that carry no timeout of their own and never settle when the broker dies under them:
 * flush (waits for a PONG) and batch direct get (waits for its end-of-batch).
 */
export async function bounded<T>(nc: NatsConnection, what: string, work: Promise<T>, ms = REQUEST_TIMEOUT_MS, onGiveUp?: () => void): Promise<T> {
  let forget = () => {};
  const closed = new Promise<never>((_, reject) => (forget = whenClosed(nc, () => reject(new NatsUnavailable(`${what}: NATS connection closed`)))));
  try {
    return await deadlineFor(Promise.race([work, closed]), ms, `${what} timed out after ${ms} ms`);
  } catch (err) {
    onGiveUp?.();
    throw err;
  } finally {
    forget();
  }
}

/**
 * Calls `fn` once `nc` closes (at once if it is closed); returns a function that cancels that.
 * One reaction per connection: racing every call against `nc.closed()` itself would pile up
 * reactions for as long as the connection lives, which on the gateway's warm one is days.
 */
function whenClosed(nc: NatsConnection, fn: () => void): () => void {
  let waiting = closeWaiters.get(nc);
  if (!waiting) {
    const set = (waiting = new Set());
    closeWaiters.set(nc, set);
    void nc.closed().then(() => {
      for (const f of set) f();
      set.clear();
    });
  }
  if (nc.isClosed()) {
    fn();
    return () => {};
  }
  waiting.add(fn);
  const set = waiting;
  return () => void set.delete(fn);
}

const closeWaiters = new WeakMap<NatsConnection, Set<() => void>>();

/** Flushes, so that pending acks and naks reach the server. */
export function flushNats(nc: NatsConnection): Promise<void> {
  return bounded(nc, "NATS flush", nc.flush());
}

/**
 * Drains the connection, flushing pending acks and naks. Bounded: a connection whose broker died
 * mid-invocation may never report it, and a drain waiting on it would hold the invocation open.
 */
export async function closeNats(nc: NatsConnection): Promise<void> {
  const drained = await bounded(nc, "NATS drain", nc.drain(), DRAIN_TIMEOUT_MS).then(
    () => true,
    () => false,
  );
  if (!drained && !nc.isClosed()) void nc.close().catch(() => undefined);
}

/** Runs `fn` on a fresh connection and always drains it (flushing pending acks) afterwards. */
export async function withNats<T>(settings: NatsSettings, fn: (h: NatsHandle) => Promise<T>): Promise<T> {
  const handle = await openNats(settings);
  try {
    return await fn(handle);
  } finally {
    await closeNats(handle.nc);
  }
}

/** Scheme, host and port of each URL: never its user, password, path or query (a token may be there). */
export function natsHosts(urls: string[]): string {
  return urls
    .map((u) => {
      try {
        const url = new URL(u);
        return `${url.protocol}//${url.host}`;
      } catch {
        return "(unparseable URL)";
      }
    })
    .join(",");
}
