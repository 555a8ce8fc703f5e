// Admission under contention: `concurrency` invocations (each with its own NATS connection, as
// separate Worker isolates have) admit and release assignments against one backend's pool of
// `capacity` slots for `seconds`. Counts admissions plus releases per second, and the NATS
// requests each operation made. Admission has no compare-and-set loop, so a retry can only be
// a request past the fixed ones (one to admit, three to release); it is counted as such.
import { openNats, closeNats } from "../src/nats/connection.ts";
import { createAdmission } from "../src/state/admission.ts";

/** Fixed requests of one admit (a publish) and one release (two purges and a stream info, sent together). */
const FIXED = { admit: 1, release: 3 };

/**
 * @param {{ natsUrl: string, config: { stream: string, subjectBase: string, natsAuth: unknown }, capacity: number, concurrency?: number, seconds?: number }} o
 */
export async function measureAdmission({ natsUrl, config, capacity, concurrency = 32, seconds = 10 }) {
  const stats = { requests: 0, admitted: 0, released: 0, refused: 0, gaveUp: 0, errors: 0 };
  const opts = { names: config, capacity: { pod: capacity, vm: 0 }, leaseTtlMs: 3_600_000, registrationLeaseMs: 60_000 };
  const until = Date.now() + seconds * 1_000;
  const started = Date.now();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      const handle = await openNats({ natsServers: [natsUrl], natsAuth: config.natsAuth });
      const request = handle.nc.request.bind(handle.nc);
      handle.nc.request = (...args) => (stats.requests++, request(...args));
      try {
        const admission = createAdmission(handle, opts);
        for (let n = 0; Date.now() < until; n++) {
          const id = `w${worker}-${n}`;
          try {
            if (await admission.acquire("pod", id)) stats.admitted++;
            else stats.refused++;
            await admission.release("pod", id);
            stats.released++;
          } catch (err) {
            if (err?.name === "CasGaveUp") stats.gaveUp++;
            else stats.errors++;
          }
        }
      } finally {
        await closeNats(handle.nc);
      }
    }),
  );
  const elapsed = (Date.now() - started) / 1_000;
  const ops = stats.admitted + stats.released + stats.refused;
  const fixed = (stats.admitted + stats.refused) * FIXED.admit + stats.released * FIXED.release;
  return {
    concurrency,
    capacity,
    seconds: Number(elapsed.toFixed(1)),
    opsPerSec: Number((ops / elapsed).toFixed(1)),
    admissionsPerSec: Number((stats.admitted / elapsed).toFixed(1)),
    requestsPerOp: ops ? Number((stats.requests / ops).toFixed(2)) : null,
    retriesPerOp: ops ? Number((Math.max(0, stats.requests - fixed) / ops).toFixed(2)) : null,
    gaveUp: stats.gaveUp,
    errors: stats.errors,
  };
}
