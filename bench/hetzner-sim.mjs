// The policies of bench:hetzner-billing, run on the real hetzner driver over the fake Hetzner API
// in simulated time (events in time order; the fake's clock moved to each event's time before its
// driver calls). A job's start time runs from its queued to the moment a runner takes it:
// - a server per job: a create, booted after a draw around CREATE_MS;
// - rebuild on demand (reuse: "rebuild" as before #57): a parked server rebuilt for the job (a draw
//   around REBUILD_MS), else a create; a finished server is parked while its hour lasts;
// - warm by reuse: a finished job's server is rebuilt at once as a warm runner bound to it, idle
//   once booted; a job takes an idle warm runner at its next poll (act_runner polls every 2 s),
//   else asks for its own server as above; an idle warm runner is given up (its server deleted)
//   warmUntil before its paid hour ends;
// - warm by reuse with waitForReuseMs: a job with no idle warm runner waits for one being rebuilt
//   when it comes up within that bound from the job's queued.
// What is simplified: a job's own runner keeps its job (the real pools hand a job to whichever
// runner polls first, and make the other warm); runners claim as they come up.

const POLL_MS = 2_000;
const TICK_MS = 60_000;

/** A seeded generator in [0, 1). */
export function seeded(seed) {
  let x = seed >>> 0;
  return () => (x = (Math.imul(x, 1103515245) + 12345) >>> 0) / 2 ** 32;
}

/** A draw around `mean`, from 0.75× to 1.25× of it. */
const around = (rand, mean) => Math.round(mean * (0.75 + 0.5 * rand()));

export function percentiles(values) {
  const s = [...values].sort((a, b) => a - b);
  const at = (p) => (s.length ? s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] : 0);
  return { p50: at(50), p90: at(90), p99: at(99) };
}

/**
 * Runs `jobs` ({ id, atMs, runMs }) under `policy` ("perJob" | "onDemand" | "warm"), with
 * `waitForReuseMs`; `d` gives the driver and the clock: { driver, setTime(t), request(id, reuseServer?), end }.
 */
export async function simulate(d, jobs, { policy, waitForReuseMs = 0, warmUntilMs = 4 * 60_000, createMs = 45_000, rebuildMs = 30_000, seed = 7 }) {
  const rand = seeded(seed);
  const events = [];
  const push = (at, kind, data) => {
    events.push({ at, kind, data, n: events.length });
  };
  for (const j of jobs) push(j.atMs, "queued", j);
  const lastArrival = Math.max(...jobs.map((j) => j.atMs));
  for (let t = 0; t <= lastArrival + 3 * 3_600_000; t += TICK_MS) push(t, "tick");
  const starts = [];
  const by = { warm: 0, rebuilt: 0, created: 0 };
  /** Warm runners by reuse: id → { server, upAt, until, busy } */
  const warm = new Map();
  const queue = [];
  let seq = 0;
  const signal = () => AbortSignal.timeout(10_000);
  const take = (j, at, via) => {
    starts.push(at - j.atMs);
    by[via]++;
  };
  // The driver speaks epoch ms; the simulation, ms from its start.
  const parkedServers = async () =>
    (await d.driver.parked("small"))
      .map((p) => ({ ...p, paidUntil: p.paidUntil - d.start }))
      .filter((p) => ![...warm.values()].some((w) => w.server === p.server));
  const fillWarm = async (t) => {
    if (policy !== "warm") return;
    for (const p of await parkedServers()) {
      if (p.paidUntil - warmUntilMs <= t) continue;
      const id = `warm-${seq++}`;
      await d.driver.accept(d.request(id, p.server), signal()).catch(() => undefined);
      const w = { id, server: p.server, upAt: t + around(rand, rebuildMs), until: p.paidUntil - warmUntilMs, busy: false };
      warm.set(id, w);
      push(w.upAt, "warm_up", w);
      push(w.until, "warm_until", w);
    }
  };
  const ownRunner = async (j, t) => {
    const before = policy === "perJob" ? 0 : (await d.driver.parked("small")).length;
    await d.driver.accept(d.request(j.id), signal());
    const rebuilt = policy !== "perJob" && (await d.driver.parked("small")).length < before;
    const up = t + around(rand, rebuilt ? rebuildMs : createMs);
    push(up + Math.round(rand() * POLL_MS), "own_up", { j, via: rebuilt ? "rebuilt" : "created" });
  };
  /** An idle warm runner takes the oldest waiting job at its next poll. */
  const dispatch = (t) => {
    for (const w of warm.values()) {
      if (w.busy || w.upAt > t || !queue.length) continue;
      const j = queue.shift();
      w.busy = true;
      const at = Math.max(t, w.upAt) + Math.round(rand() * POLL_MS);
      take(j, at, "warm");
      push(at + j.runMs, "warm_done", w);
    }
  };
  events.sort((a, b) => a.at - b.at || a.n - b.n);
  while (events.length) {
    events.sort((a, b) => a.at - b.at || a.n - b.n);
    const e = events.shift();
    await d.setTime(e.at);
    if (e.kind === "tick") {
      await d.tick();
      continue;
    }
    if (e.kind === "queued") {
      const j = e.data;
      const idle = [...warm.values()].some((w) => !w.busy && w.upAt <= e.at);
      const soon = waitForReuseMs > 0 && [...warm.values()].some((w) => !w.busy && w.upAt > e.at && w.upAt - j.atMs <= waitForReuseMs);
      if (policy === "warm" && (idle || soon)) {
        queue.push(j);
        dispatch(e.at);
        if (soon && !idle) push(j.atMs + waitForReuseMs, "wait_over", j);
        continue;
      }
      await ownRunner(j, e.at);
      continue;
    }
    if (e.kind === "wait_over") {
      // Still waiting: its own runner now.
      const i = queue.indexOf(e.data);
      if (i >= 0) {
        queue.splice(i, 1);
        await ownRunner(e.data, e.at);
      }
      continue;
    }
    if (e.kind === "own_up") {
      take(e.data.j, e.at, e.data.via);
      push(e.at + e.data.j.runMs, "own_done", e.data.j);
      continue;
    }
    if (e.kind === "own_done") {
      await d.driver.teardown(e.data.id, signal());
      d.end(e.data.id);
      await fillWarm(e.at);
      dispatch(e.at);
      continue;
    }
    if (e.kind === "warm_up") {
      dispatch(e.at);
      continue;
    }
    if (e.kind === "warm_done") {
      const w = e.data;
      warm.delete(w.id);
      await d.driver.teardown(w.id, signal());
      d.end(w.id);
      await fillWarm(e.at);
      dispatch(e.at);
      continue;
    }
    if (e.kind === "warm_until") {
      const w = e.data;
      if (warm.get(w.id) !== w || w.busy) continue;
      warm.delete(w.id);
      await d.driver.teardown(w.id, signal());
      d.end(w.id);
    }
  }
  return { starts: percentiles(starts), startsMean: Math.round(starts.reduce((a, b) => a + b, 0) / Math.max(1, starts.length)), by, jobs: starts.length };
}
