// Opening a connection with several NATS_URL entries: a dead or silent server is passed over
// for the next one, within a bound, and no attempt outlives it.
import { createServer, type Server, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { closeNats, isNatsUnavailable, NatsUnavailable, openNats } from "../../src/nats/connection.ts";
import { jserrors } from "@nats-io/jetstream/internal";
import { JetStreamApiError } from "@nats-io/jetstream";

const live = inject("natsWsUrl");
let silent: Server;
let silentUrl: string;
const sockets: Socket[] = [];
let refusedUrl: string;

beforeAll(async () => {
  // Accepts the TCP connection and never answers: a node that hangs (or a blackholed route).
  silent = createServer((s) => void sockets.push(s));
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
  silentUrl = `ws://127.0.0.1:${(silent.address() as { port: number }).port}`;
  // A port nobody listens on: refused at once.
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
  refusedUrl = `ws://127.0.0.1:${(probe.address() as { port: number }).port}`;
  await new Promise((r) => probe.close(r));
});
afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((r) => silent.close(r));
});

const auth = { kind: "none" } as const;

async function openTimed(servers: string[]) {
  const started = Date.now();
  try {
    const handle = await openNats({ natsServers: servers, natsAuth: auth });
    await closeNats(handle.nc);
    return { ok: true, ms: Date.now() - started };
  } catch (err) {
    return { ok: false, ms: Date.now() - started, err };
  }
}

describe("openNats over several URLs", () => {
  it("fails over from a refusing server, every time, whichever it tries first", async () => {
    const results = await Promise.all(Array.from({ length: 10 }, () => openTimed([refusedUrl, live, refusedUrl])));
    expect(results.map((r) => r.ok)).toEqual(Array(10).fill(true));
    for (const r of results) expect(r.ms).toBeLessThan(2_000);
  });

  it("fails over from a server that accepts and never answers, within the connect bound", async () => {
    const results = await Promise.all(Array.from({ length: 4 }, () => openTimed([silentUrl, live])));
    expect(results.map((r) => r.ok)).toEqual(Array(4).fill(true));
    for (const r of results) expect(r.ms).toBeLessThan(3_500);
  });

  it("gives up within the bound when no server answers, saying so without any URL", async () => {
    const r = await openTimed([silentUrl, refusedUrl, "ws://user:secret-pw@127.0.0.1:1"]);
    expect(r.ok).toBe(false);
    expect(r.err).toBeInstanceOf(NatsUnavailable);
    expect(String((r.err as Error).message)).not.toContain("secret-pw");
    expect(String((r.err as Error).message)).not.toContain("127.0.0.1");
    expect(r.ms).toBeLessThan(6_000);
  });
});

describe("isNatsUnavailable", () => {
  it("knows JetStream's 'not enabled' (no responder: a stream without a leader) by nats.js's own class, not imported by src; near misses: an API refusal, a plain error of that message", () => {
    expect(isNatsUnavailable(new jserrors.JetStreamNotEnabled("jetstream is not enabled"))).toBe(true);
    expect(isNatsUnavailable(new JetStreamApiError({ code: 404, err_code: 10059, description: "stream not found" }))).toBe(false);
    expect(isNatsUnavailable(new Error("jetstream is not enabled"))).toBe(false);
  });
});
