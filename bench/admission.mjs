// Admission under contention: `concurrency` invocations (each with its own NATS connection, as
// separate Worker isolates have) admit and release assignments against one backend's pool of
// `capacity` slots for `seconds`. Counts admissions plus releases per second, and compare-and-set
// retries per operation (writes that lost to another writer), through a KV that counts its writes.
import { Kvm } from "@nats-io/kv";
import { admissionBucket } from "../src/names.ts";
import { openNats, closeNats } from "../src/nats/connection.ts";
import { createAdmission } from "../src/state/admission.ts";

/** A KV whose writes are counted: every update or create is one compare-and-set attempt. */
function counting(kv, stats) {
  return new Proxy(kv, {
    get(target, prop) {
      const value = Reflect.get(target, prop);
      if (prop !== "update" && prop !== "create") return typeof value === "function" ? value.bind(target) : value;
      return async (...args) => {
        stats.attempts++;
        try {
          return await value.apply(target, args);
        } catch (err) {
          stats.lost++;
          throw err;
        }
      };
    },
  });
}

/**
 * @param {{ natsUrl: string, config: { stream: string, subjectBase: string, natsAuth: unknown }, capacity: number, concurrency?: number, seconds?: number }} o
 */
export async function measureAdmission({ natsUrl, config, capacity, concurrency = 32, seconds = 10 }) {
  const stats = { attempts: 0, lost: 0, admitted: 0, released: 0, refused: 0, gaveUp: 0, errors: 0 };
  const bucket = admissionBucket(config);
  const opts = { capacity: { pod: capacity, vm: 0 }, leaseTtlMs: 3_600_000, registrationLeaseMs: 60_000, now: Date.now };
  const until = Date.now() + seconds * 1_000;
  const started = Date.now();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      const handle = await openNats({ natsServers: [natsUrl], natsAuth: config.natsAuth });
      try {
        const kv = await new Kvm(handle.js).open(bucket, { allow_direct: true });
        const leader = await new Kvm(handle.js).open(bucket, { allow_direct: false });
        const admission = createAdmission(counting(kv, stats), opts, leader);
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
  return {
    concurrency,
    capacity,
    seconds: Number(elapsed.toFixed(1)),
    opsPerSec: Number((ops / elapsed).toFixed(1)),
    admissionsPerSec: Number((stats.admitted / elapsed).toFixed(1)),
    retriesPerOp: ops ? Number(((stats.attempts - ops) / ops).toFixed(2)) : null,
    gaveUp: stats.gaveUp,
    errors: stats.errors,
  };
}
