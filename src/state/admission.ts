// Capacity admission: one KV entry per backend holds the leases of the runners it admitted.
// Leases are idempotent per assignment id and expire after the lease TTL, so a slot that was
// never released comes back by itself.
import type { KV } from "@nats-io/kv";
import { admissionKey, type Backend } from "../names.ts";
import { casUpdate, readJson } from "./kv.ts";

interface Leases {
  leases: Record<string, number>;
}

/** Admission pool of one deployment: capacity per backend, enforced across every invocation. */
export interface Admission {
  /** True when `id` holds a slot (already, or newly granted). */
  acquire(backend: Backend, id: string): Promise<boolean>;
  /** Frees the slot of `id`; a no-op when it holds none. */
  release(backend: Backend, id: string): Promise<void>;
  /** Ids holding an unexpired slot. */
  holders(backend: Backend): Promise<string[]>;
}

export interface AdmissionOptions {
  capacity: Record<Backend, number>;
  leaseTtlMs: number;
  now: () => number;
}

export function createAdmission(kv: KV, opts: AdmissionOptions): Admission {
  const live = (leases: Record<string, number>, now: number) =>
    Object.fromEntries(Object.entries(leases).filter(([, expires]) => expires > now));
  return {
    acquire(backend, id) {
      return casUpdate<Leases, boolean>(kv, admissionKey(backend), (current) => {
        const now = opts.now();
        const leases = live(current?.value.leases ?? {}, now);
        if (id in leases) return { value: undefined, result: true };
        if (Object.keys(leases).length >= opts.capacity[backend]) return { value: undefined, result: false };
        return { value: { leases: { ...leases, [id]: now + opts.leaseTtlMs } }, result: true };
      });
    },
    release(backend, id) {
      return casUpdate<Leases, void>(kv, admissionKey(backend), (current) => {
        if (!current || !(id in current.value.leases)) return { value: undefined, result: undefined };
        const { [id]: _released, ...rest } = live(current.value.leases, opts.now());
        return { value: { leases: rest }, result: undefined };
      });
    },
    async holders(backend) {
      const current = await readJson<Leases>(kv, admissionKey(backend));
      return Object.keys(live(current?.value.leases ?? {}, opts.now()));
    },
  };
}
