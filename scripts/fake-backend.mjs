// A runner backend speaking the `http` driver contract, for tests and `npm start`.
// Several tests share one server: each uses its own path prefix (namespace) with its own
// behaviour and state. Control endpoints live under /<ns>/_control.
import { startTenantServer } from "./fake-http.mjs";
import { startRunner } from "./fake-runner.mjs";

const defaults = () => ({
  token: "backend-token",
  readyAfter: 0,
  failFirst: 0,
  hangFirst: 0,
  hangMs: 60_000,
  delayMs: 0,
  readyAfterMs: 0,
  autoClaimMs: -1,
  autoCompleteMs: -1,
  // Flaky mode: each PUT or DELETE fails with 503 (failRate) or answers only after hangMs (hangRate),
  // drawn from a PRNG seeded with `seed`, so a failing run can be replayed.
  failRate: 0,
  hangRate: 0,
  seed: 1,
  // Runner mode: each workload runs a fake act_runner (fake-runner.mjs) from the identity it is
  // handed; it is ready once booted, polls Gitea for a task, runs it and exits.
  runner: false,
  bootMs: 0,
  fetchIntervalMs: 2_000,
  jobMs: 1_000,
});

/** mulberry32: a small seeded PRNG. */
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `mode` sets the behaviour of every namespace that has not been given one through /_control/mode. */
export async function startFakeBackend({ mode = {} } = {}) {
  const listeners = new Set();
  const running = new Set();
  const newSpace = () => ({ mode: { ...defaults(), ...mode }, runners: new Map(), requests: [], calls: 0 });
  const server = await startTenantServer(newSpace, async ({ req, res, text, url, path, tenant: s, send }) => {
    const ns = decodeURIComponent(url.pathname.split("/")[1] ?? "");
    const [, kind, id] = path.split("/").map(decodeURIComponent);
    if (kind === "_control") return control(s, id, req.method, text, send, url);
    if (kind !== "runners" || !id) return send(404, { error: "not found" });
    s.requests.push({ method: req.method, path: url.pathname, headers: req.headers, body: text, at: Date.now() });
    if (req.headers.authorization !== `Bearer ${s.mode.token}`) return send(401, { error: "unauthorized" });
    const roll = s.mode.failRate || s.mode.hangRate ? (s.rng ??= prng(s.mode.seed))() : 1;
    if (roll < s.mode.failRate) {
      s.failed = (s.failed ?? 0) + 1;
      return send(503, { error: "backend unavailable" });
    }
    // A hang does the work but answers too late: the caller times out not knowing it succeeded.
    const hang = roll < s.mode.failRate + s.mode.hangRate;
    if (hang) s.hung = (s.hung ?? 0) + 1;
    const late = (status, body) => (hang ? setTimeout(() => send(status, body), s.mode.hangMs) : send(status, body));
    if (req.method === "DELETE") {
      s.runners.get(id)?.stop?.();
      const existed = s.runners.delete(id);
      s.live?.delete(id);
      if (existed) s.deleted = (s.deleted ?? 0) + 1;
      return late(existed ? 200 : 404, existed ? { status: "deleted" } : { error: "not found" });
    }
    if (req.method !== "PUT") return send(405, { error: "method not allowed" });
    s.inFlight = (s.inFlight ?? 0) + 1;
    s.maxInFlight = Math.max(s.maxInFlight ?? 0, s.inFlight);
    res.on("close", () => s.inFlight--);
    const call = ++s.calls;
    if (call <= s.mode.hangFirst) {
      await new Promise((r) => setTimeout(r, s.mode.hangMs));
      return send(500, { error: "hung" });
    }
    if (call <= s.mode.hangFirst + s.mode.failFirst) return send(503, { error: "backend unavailable" });
    if (s.mode.delayMs) await new Promise((r) => setTimeout(r, s.mode.delayMs));
    let body;
    try {
      body = JSON.parse(text);
    } catch {
      return send(400, { error: "bad json" });
    }
    let runner = s.runners.get(id);
    if (!runner) {
      // Its job's owner (lower case, as Gitea's are case-insensitive): live runners are counted per owner too.
      const owner = body.assignment?.job?.repository?.split("/")[0]?.toLowerCase();
      runner = { id, puts: 0, created: Date.now(), claimUrl: body.claimUrl, claimToken: body.claimToken, completeUrl: body.completeUrl, owner };
      s.runners.set(id, runner);
      s.created = (s.created ?? 0) + 1;
      // Live from creation until its runner completes or it is deleted: what capacity bounds.
      (s.live ??= new Set()).add(id);
      s.maxLive = Math.max(s.maxLive ?? 0, s.live.size);
      if (owner) {
        const live = [...s.live].filter((r) => s.runners.get(r)?.owner === owner).length;
        (s.maxLiveByOwner ??= Object.create(null))[owner] = Math.max(s.maxLiveByOwner[owner] ?? 0, live);
      }
      if (s.mode.runner && (body.runner || body.forgejo)) {
        const r = runner;
        const stop = startRunner(body, s.mode, (e) => {
          if (e.event === "done" || e.event === "stopped") running.delete(stop);
          if (e.event === "booted") r.booted = Date.now();
          if (e.event === "task") r.task = e.task;
          if (e.event === "done") {
            r.ended = Date.now();
            s.live?.delete(id);
          }
          for (const l of listeners) l({ ns, id, event: `runner_${e.event}`, ...(e.result ? { result: e.result } : {}) });
        });
        r.stop = stop;
        running.add(stop);
      }
    }
    runner.puts++;
    const ready = runner.puts > s.mode.readyAfter && Date.now() - runner.created >= s.mode.readyAfterMs && (!runner.stop || runner.booted !== undefined);
    if (ready && s.mode.autoClaimMs >= 0 && !runner.claimScheduled) {
      runner.claimScheduled = true;
      setTimeout(() => {
        fetch(runner.claimUrl, { method: "POST", headers: { authorization: `Bearer ${runner.claimToken}` } })
          .then((r) => {
            runner.claimStatus = r.status;
            for (const l of listeners) l({ ns, id, event: "claim", status: r.status });
            if (r.ok && s.mode.autoCompleteMs >= 0) {
              setTimeout(() => {
                // Done with its job from the moment it says so: the dispatcher frees the slot before
                // it answers, so another isolate may admit the next runner before this answer lands.
                // A refused completion leaves it holding its slot, so it counts again.
                const wasLive = s.live?.delete(id);
                const refused = () => {
                  if (!wasLive || !s.runners.has(id)) return;
                  s.live.add(id);
                  s.maxLive = Math.max(s.maxLive ?? 0, s.live.size);
                };
                fetch(runner.completeUrl, { method: "POST", headers: { authorization: `Bearer ${runner.claimToken}` } })
                  .then((c) => {
                    if (!c.ok) refused();
                    for (const l of listeners) l({ ns, id, event: "complete", status: c.status });
                  })
                  .catch(refused);
              }, s.mode.autoCompleteMs);
            }
          })
          .catch(() => undefined);
      }, s.mode.autoClaimMs);
    }
    for (const l of listeners) l({ ns, id, event: ready ? "ready" : "pending" });
    return late(ready ? 200 : 202, { status: ready ? "ready" : "pending" });
  });
  function control(s, what, method, text, send, url) {
    if (what === "mode" && method === "POST") {
      s.mode = { ...defaults(), ...JSON.parse(text || "{}") };
      s.calls = 0;
      s.rng = undefined;
      return send(200, s.mode);
    }
    if (what === "forget" && method === "POST") {
      // The workload vanished (crashed, evicted): the next PUT for it creates a new one.
      s.runners.delete(JSON.parse(text).id);
      return send(200, {});
    }
    if (what === "state") {
      // ?brief: counts only. Polling the whole log (every request with its body) under load costs
      // this process more CPU than serving the requests, and slows the calls it is meant to time.
      const brief = url.searchParams.has("brief");
      return send(200, {
        ...(brief ? { runnerCount: s.runners.size } : { runners: [...s.runners.values()], requests: s.requests }),
        created: s.created ?? 0,
        calls: s.calls,
        maxInFlight: s.maxInFlight ?? 0,
        maxLive: s.maxLive ?? 0,
        maxLiveByOwner: s.maxLiveByOwner ?? {},
        failed: s.failed ?? 0,
        hung: s.hung ?? 0,
        deleted: s.deleted ?? 0,
      });
    }
    return send(404, { error: "unknown control" });
  }
  const close = () => {
    for (const stop of running) stop();
    return server.close();
  };
  return { url: server.url, onEvent: (fn) => listeners.add(fn), close };
}
