// Jobs completed per second with `isolates` Workers (separate workerd processes, see BENCH_HOST) sharing
// one NATS and one backend pool of `capacity` slots, whose runners claim after `claimMs` and
// complete after `runMs`. The pool's ceiling is capacity / (claimMs + runMs): a freed slot must be
// taken again at once for the figure to come near it. Cron fires on every isolate at the same
// moment, once a minute as in production, so freed slots are not left to the next tick.
import { startWorker } from "./lib.mjs";

/**
 * @param {{ vars: Record<string, string>, backend: { onEvent(fn: (e: { ns: string, event: string, status?: number }) => void): void },
 *   backendMode(vars: Record<string, string>, mode: object): Promise<unknown>, send(worker: { url: string }, job: number): Promise<void>,
 *   isolates: number, jobs: number, capacity: number, claimMs: number, runMs: number, firstJob: number }} o
 */
export async function measureIsolates({ vars, backend, backendMode, send, isolates, jobs, capacity, claimMs, runMs, firstJob }) {
  await backendMode(vars, { autoClaimMs: claimMs, autoCompleteMs: runMs });
  const ns = vars.POD_BACKEND_URL.split("/").pop();
  let completed = 0;
  let done;
  const allDone = new Promise((r) => (done = r));
  backend.onEvent((e) => {
    if (e.ns === ns && e.event === "complete" && e.status === 200 && ++completed === jobs) done();
  });
  // Each Worker's own URL: the runners it provisions claim and complete there.
  const workers = await Promise.all(Array.from({ length: isolates }, () => startWorker({ ...vars, PUBLIC_URL: undefined })));
  let ticking = true;
  let stop;
  const stopped = new Promise((r) => (stop = r));
  const ticks = (async () => {
    while (ticking) {
      await Promise.all(workers.map((w) => w.tick().catch(() => undefined)));
      await Promise.race([new Promise((r) => setTimeout(r, 60_000)), stopped]);
    }
  })();
  try {
    const started = Date.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < jobs) {
          const i = next++;
          await send(workers[i % isolates], firstJob + i);
        }
      }),
    );
    const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error(`isolates: ${completed} of ${jobs} completed in 300 s`)), 300_000));
    await Promise.race([allDone, timeout]);
    const seconds = (Date.now() - started) / 1_000;
    const jobsPerSec = jobs / seconds;
    const ceiling = capacity / ((claimMs + runMs) / 1_000);
    return {
      isolates,
      jobs,
      capacity,
      runMs,
      seconds: Number(seconds.toFixed(1)),
      jobsPerSec: Number(jobsPerSec.toFixed(3)),
      ceiling: Number(ceiling.toFixed(3)),
      ofCeiling: Number((jobsPerSec / ceiling).toFixed(2)),
    };
  } finally {
    ticking = false;
    stop();
    for (const w of workers) w.stop();
    await ticks;
  }
}
