// Opens one NATS connection per invocation. A connection kept across requests hangs silently
// at the edge, so every caller goes through withNats, which drains in `finally`.
import { credsAuthenticator, wsconnect, type NatsConnection } from "@nats-io/nats-core";
import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import type { Config, NatsAuth } from "../config.ts";

export interface NatsHandle {
  nc: NatsConnection;
  js: JetStreamClient;
}

export type NatsSettings = Pick<Config, "natsServers" | "natsAuth">;

const CONNECT_TIMEOUT_MS = 5_000;
const REQUEST_TIMEOUT_MS = 5_000;

export async function openNats(settings: NatsSettings, name = "gitea-edge-dispatcher"): Promise<NatsHandle> {
  const nc = await wsconnect({
    servers: settings.natsServers,
    name,
    timeout: CONNECT_TIMEOUT_MS,
    // One invocation is short-lived: a broken connection is an error for this invocation, not a
    // reason to wait around for the server.
    reconnect: false,
    maxReconnectAttempts: 0,
    ...authOptions(settings.natsAuth),
  });
  return { nc, js: jetstream(nc, { timeout: REQUEST_TIMEOUT_MS, checkAPI: false }) };
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

/** Runs `fn` on a fresh connection and always drains it (flushing pending acks) afterwards. */
export async function withNats<T>(settings: NatsSettings, fn: (h: NatsHandle) => Promise<T>): Promise<T> {
  const handle = await openNats(settings);
  try {
    return await fn(handle);
  } finally {
    await handle.nc.drain().catch(() => handle.nc.close());
  }
}
