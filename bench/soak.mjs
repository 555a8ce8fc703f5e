// The soak (BENCH_ONLY=soak): a few thousand jobs through one Worker in workerd (Miniflare, the
// deploy bundle), runners claiming and completing through the API, with the JS heap read after a
// garbage collection at the start, the middle and the end. The inspector is attached only for
// those readings. In workerd the gateway Durable Object runs in the Worker's isolate, so one
// reading holds both.
import { connectInspector, freePort, treeRssMB } from "./lib.mjs";

/** The isolate's heap after a full GC, through the inspector (connected for this reading only). */
async function heapAfterGc(worker, inspectorPort) {
  const { call, close } = await connectInspector(inspectorPort);
  try {
    // workerd runs the collection once a request enters the isolate: poke it until it has.
    const gc = call("HeapProfiler.collectGarbage");
    let done = false;
    void gc.then(() => (done = true));
    for (let i = 0; i < 50 && !done; i++) {
      await (await fetch(`${worker.url}/openapi.json`)).arrayBuffer();
      await new Promise((r) => setTimeout(r, 100));
    }
    if (!done) throw new Error("the isolate did not collect garbage");
    const { result } = await call("Runtime.getHeapUsage");
    // The process's resident memory beside it: workerd's own, not only the JS heap.
    return {
      usedMB: +(result.usedSize / 2 ** 20).toFixed(2),
      totalMB: +(result.totalSize / 2 ** 20).toFixed(2),
      workerdRssMB: treeRssMB(worker.pid).workerd ?? null,
    };
  } finally {
    close();
  }
}

/**
 * @param {{ vars: Record<string, string>, backendMode: Function, startWorker: Function, sendWebhook: Function, log: Function, jobs: number, perSec: number }} o
 */
export async function measureSoak({ vars, backendMode, startWorker, sendWebhook, log, jobs, perSec }) {
  await backendMode(vars, { autoClaimMs: 0, autoCompleteMs: 300 });
  const inspectorPort = await freePort();
  const worker = await startWorker(vars, undefined, "miniflare", { inspectorPort });
  const completed = () => new Set(worker.events.filter((e) => e.event === "completed").map((e) => e.assignment)).size;
  let next = 900_000;
  let refused;
  const send = async (n) => {
    const first = next;
    next += n;
    const started = Date.now();
    const inFlight = new Set();
    for (let i = 0; i < n; i++) {
      const due = started + (i * 1000) / perSec;
      if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
      const p = sendWebhook(worker, first + i).then(
        () => inFlight.delete(p),
        (err) => (inFlight.delete(p), (refused = err)),
      );
      inFlight.add(p);
      if (inFlight.size >= 16) await Promise.race(inFlight);
    }
    await Promise.all(inFlight);
    if (refused) throw refused;
    const deadline = Date.now() + 120_000;
    while (completed() < next - 900_000 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
  };
  try {
    await send(50);
    const start = await heapAfterGc(worker, inspectorPort);
    log(`soak: heap after GC at the start ${start.usedMB} MB; ${jobs} jobs at ${perSec}/s`);
    await send(Math.floor(jobs / 2));
    const middle = await heapAfterGc(worker, inspectorPort);
    log(`soak: heap after GC in the middle ${middle.usedMB} MB`);
    await send(jobs - Math.floor(jobs / 2));
    const end = await heapAfterGc(worker, inspectorPort);
    log(`soak: heap after GC at the end ${end.usedMB} MB`);
    const done = completed() - 50;
    return { jobs, completed: done, perSec, heap: { start, middle, end }, growthKBPerJob: +(((end.usedMB - start.usedMB) * 1024) / jobs).toFixed(3) };
  } finally {
    worker.stop();
  }
}
