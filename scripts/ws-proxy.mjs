// A WebSocket proxy between NATS clients and nats-server that counts, per path tag, the client
// operations that publish (PUB/HPUB: publishes, requests, acks) and can delay every frame (an edge
// far from its NATS region). Clients connect to ws://127.0.0.1:<port>/<tag>; GET /_counts/<tag>.
// Faults per tag: POST /_reset/<tag> drops its connections at once (TCP reset); POST /_hang/<tag>
// silences them (open, but no frame passes either way; ?new=1 silences later ones too);
// POST /_resume/<tag> lets later connections through again. GET /_log/<tag>: its last operations,
// each with the time the client sent it and its subject (round trips in series, for tests).
import { appendFileSync } from "node:fs";
import { createServer } from "node:http";
import { WebSocketServer, WebSocket } from "ws";

/**
 * What a client operation is, from its subject: a kind (publish, KV put, direct get, stream API
 * request, pull, ack) and what it is on (the stream, bucket or consumer; ids left out).
 */
export function kindOf(subject) {
  const t = subject.split(".");
  if (subject.startsWith("$JS.ACK.")) return `ack ${t[3]}`;
  if (subject.startsWith("$JS.API.CONSUMER.MSG.NEXT.")) return `pull ${t[6]}`;
  if (subject.startsWith("$JS.API.DIRECT.GET.")) return `direct get ${t[4]}`;
  if (subject.startsWith("$JS.API.")) return `api ${t[2]}.${t[3]} ${t[4] ?? ""}`.trim();
  if (subject.startsWith("$KV.")) return `kv put ${t[1]}`;
  return `publish ${t.slice(0, Math.min(t.length, 3)).join(".")}`;
}

/** Counts PUB/HPUB operations in a client→server byte stream, skipping payloads; `kinds` by kindOf. */
export function createOpCounter(trace) {
  let buffer = Buffer.alloc(0);
  let skip = 0;
  const counts = { pub: 0, request: 0, sub: 0, pulls: 0, kinds: {} };
  return {
    counts,
    feed(chunk) {
      buffer = Buffer.concat([buffer, chunk]);
      for (;;) {
        if (skip > 0) {
          const n = Math.min(skip, buffer.length);
          buffer = buffer.subarray(n);
          skip -= n;
          if (skip > 0) return;
        }
        const eol = buffer.indexOf("\r\n");
        if (eol < 0) return;
        const line = buffer.subarray(0, eol).toString("latin1");
        buffer = buffer.subarray(eol + 2);
        const parts = line.split(" ").filter(Boolean);
        const op = parts[0]?.toUpperCase();
        if (op === "PUB" || op === "HPUB") {
          // PUB subj [reply] size | HPUB subj [reply] hdrsize totalsize
          const size = Number(parts[parts.length - 1]);
          const hasReply = parts.length === (op === "PUB" ? 4 : 5);
          counts.pub++;
          if (hasReply) counts.request++;
          const kind = kindOf(parts[1] ?? "");
          // A direct get's body (which keys it reads) goes to the trace too, when it came in this chunk.
          const body = kind.startsWith("direct get") && buffer.length >= size ? buffer.subarray(0, size).toString("latin1").slice(-160) : "";
          if (trace) trace(parts[1] ?? "", size, body);
          counts.kinds[kind] = (counts.kinds[kind] ?? 0) + 1;
          if (kind.startsWith("pull ")) counts.pulls++;
          skip = size + 2;
        } else if (op === "SUB") counts.sub++;
      }
    },
  };
}

const LOG_LIMIT = 2_000;

export async function startWsProxy({ upstream, delayMs = 0 }) {
  const tags = new Map();
  const tagOf = (name) => {
    // byConnection: [pub, pulls] of each connection, to tell request handlers from reconcile passes.
    if (!tags.has(name)) tags.set(name, { pub: 0, request: 0, sub: 0, connections: 0, byConnection: [] });
    return tags.get(name);
  };
  /** The last LOG_LIMIT operations per tag: [time, subject]. */
  const logs = new Map();
  const logOf = (name) => logs.get(name) ?? logs.set(name, []).get(name);
  const later = (fn) => (delayMs > 0 ? setTimeout(fn, delayMs) : fn());
  /** Live connections per tag, and the tags whose new connections are silenced too. */
  const live = new Map();
  const hangNew = new Set();
  const liveOf = (name) => live.get(name) ?? live.set(name, new Set()).get(name);
  const faults = {
    reset: (name) => liveOf(name).forEach((c) => c.reset()),
    hang: (name, newToo = false) => {
      liveOf(name).forEach((c) => (c.hung = true));
      if (newToo) hangNew.add(name);
    },
    resume: (name) => void hangNew.delete(name),
  };
  const http = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://x");
    const m = /^\/_(counts|reset|hang|resume|log)\/(.*)$/.exec(url.pathname);
    if (!m) {
      res.writeHead(404).end();
      return;
    }
    const name = decodeURIComponent(m[2]);
    if (m[1] === "log") {
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(logOf(name)));
      return;
    }
    if (m[1] !== "counts") faults[m[1]](name, url.searchParams.get("new") === "1");
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(tagOf(name)));
  });
  const wss = new WebSocketServer({ server: http });
  wss.on("connection", (client, req) => {
    const name = decodeURIComponent((req.url ?? "/").slice(1));
    const tag = tagOf(name);
    tag.connections++;
    const conn = { hung: hangNew.has(name), reset: () => {} };
    liveOf(name).add(conn);
    const index = tag.byConnection.length;
    // PROXY_TRACE=FILE: every operation's subject, with the time and its connection (for a profile of operations).
    const log = logOf(name);
    const trace = (subject, size, body = "") => {
      log.push([Date.now(), subject]);
      if (log.length > LOG_LIMIT) log.shift();
      if (process.env.PROXY_TRACE)
        appendFileSync(process.env.PROXY_TRACE, `${Date.now()} ${name} ${index} ${subject} ${size}${body ? ` ${body.replace(/\s+/g, " ")}` : ""}\n`);
    };
    const counter = createOpCounter(trace);
    const before = { ...counter.counts };
    // open: still connected (the gateway's kept connection, as against a tick's); kinds: by kindOf.
    const mine = { pub: 0, pulls: 0, open: true, kinds: counter.counts.kinds };
    tag.byConnection.push(mine);
    const server = new WebSocket(upstream);
    const pending = [];
    server.on("open", () => pending.splice(0).forEach((d) => server.send(d)));
    client.on("message", (data) => {
      counter.feed(Buffer.from(data));
      for (const k of ["pub", "request", "sub"]) tag[k] += counter.counts[k] - before[k];
      Object.assign(before, counter.counts);
      mine.pub = counter.counts.pub;
      mine.pulls = counter.counts.pulls;
      if (conn.hung) return;
      later(() => (server.readyState === WebSocket.OPEN ? server.send(data) : pending.push(data)));
    });
    server.on("message", (data) => !conn.hung && later(() => client.readyState === WebSocket.OPEN && client.send(data)));
    conn.reset = () => {
      client.terminate();
      server.terminate();
    };
    const close = () => {
      mine.open = false;
      liveOf(name).delete(conn);
      client.close();
      server.close();
    };
    client.on("close", close);
    server.on("close", close);
    client.on("error", close);
    server.on("error", close);
  });
  await new Promise((r) => http.listen(0, "127.0.0.1", r));
  const port = http.address().port;
  return {
    url: (tag) => `ws://127.0.0.1:${port}/${encodeURIComponent(tag)}`,
    counts: (tag) => structuredClone(tagOf(tag)),
    ...faults,
    reset: (tag) => (tags.delete(tag), logs.delete(tag)),
    close: () =>
      new Promise((r) => {
        for (const c of wss.clients) c.terminate();
        wss.close();
        http.close(() => r());
      }),
  };
}
