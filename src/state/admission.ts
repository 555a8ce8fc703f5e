// Capacity admission: one KV entry per backend holds the leases of the runners it admitted, and
// the runner registrations under way. Leases are idempotent per assignment id and expire after
// the lease TTL, so a slot that was never released comes back by itself. A batch of messages is
// admitted with one read and one compare-and-set.
import type { KV } from "@nats-io/kv";
import { admissionKey, type Backend } from "../names.ts";
import { casUpdate, readJson } from "./kv.ts";

interface Pool {
  leases: Record<string, number>;
  /** Assignment id → when its runner registration started; a second one must wait. */
  registering?: Record<string, number>;
}

export interface AdmissionResult {
  admitted: Set<string>;
  /** Of `reserve`, the ids this caller may register a runner for now. */
  reserved: Set<string>;
}

/** Admission pool of one deployment: capacity per backend, enforced across every invocation. */
export interface Admission {
  /** True when `id` holds a slot (already, or newly granted). */
  acquire(backend: Backend, id: string): Promise<boolean>;
  /** Admits what capacity allows, in order, and reserves runner registration for admitted `reserve` ids. */
  acquireMany(backend: Backend, ids: readonly string[], reserve?: ReadonlySet<string>): Promise<AdmissionResult>;
  /**
   * Frees the slots and registration reservations of `ids`; ids holding none are ignored.
   * Resolves true when a slot was freed in a full pool: someone may be waiting for it.
   */
  release(backend: Backend, ...ids: string[]): Promise<boolean>;
  /** Ends the registration reservations of `ids` (registered or given up), keeping their slots. */
  endRegistrations(backend: Backend, ids: readonly string[]): Promise<void>;
  /** Ids holding an unexpired slot. */
  holders(backend: Backend): Promise<string[]>;
  /** Ids whose runner registration is under way (an unexpired reservation). */
  registering(backend: Backend): Promise<string[]>;
}

export interface AdmissionOptions {
  capacity: Record<Backend, number>;
  leaseTtlMs: number;
  /** A registration that started longer ago than this and stored nothing is presumed dead. */
  registrationLeaseMs: number;
  now: () => number;
}

/** `leader`: the bucket bound without direct gets, for reads after a lost compare-and-set. */
export function createAdmission(kv: KV, opts: AdmissionOptions, leader?: KV): Admission {
  // Pools are keyed by assignment ids, which are input: Maps, never plain objects, so that an id
  // like `constructor` or `toString` is an id like any other and not an inherited property.
  const live = (entries: Record<string, number> | undefined, now: number) =>
    new Map(Object.entries(entries ?? {}).filter(([, until]) => typeof until === "number" && until > now));
  const stored = (leases: Map<string, number>, registering: Map<string, number>): Pool => ({
    leases: Object.fromEntries(leases),
    registering: Object.fromEntries(registering),
  });
  // Removes `ids` from the given parts of the pool (expired entries go too); no write when none is there.
  const drop = (backend: Backend, ids: readonly string[], parts: readonly (keyof Pool)[]) =>
    casUpdate<Pool, boolean>(kv, admissionKey(backend), (current) => {
      const now = opts.now();
      const pool = { leases: live(current?.value.leases, now), registering: live(current?.value.registering, now) };
      if (!current || !ids.some((id) => parts.some((part) => pool[part].has(id)))) return { value: undefined, result: false };
      const full = pool.leases.size >= opts.capacity[backend];
      for (const part of parts) for (const id of ids) pool[part].delete(id);
      return { value: stored(pool.leases, pool.registering), result: full && pool.leases.size < opts.capacity[backend] };
    }, leader);
  const liveIds = async (backend: Backend, part: keyof Pool) => [...live((await readJson<Pool>(kv, admissionKey(backend)))?.value[part], opts.now()).keys()];
  const admission: Admission = {
    async acquire(backend, id) {
      return (await admission.acquireMany(backend, [id])).admitted.has(id);
    },
    acquireMany(backend, ids, reserve = new Set()) {
      return casUpdate<Pool, AdmissionResult>(kv, admissionKey(backend), (current) => {
        const now = opts.now();
        const leases = live(current?.value.leases, now);
        const registering = live(current?.value.registering, now);
        const result: AdmissionResult = { admitted: new Set(), reserved: new Set() };
        let changed = leases.size !== Object.keys(current?.value.leases ?? {}).length;
        for (const id of ids) {
          if (!leases.has(id)) {
            if (leases.size >= opts.capacity[backend]) continue;
            leases.set(id, now + opts.leaseTtlMs);
            changed = true;
          }
          result.admitted.add(id);
          if (reserve.has(id) && !registering.has(id)) {
            registering.set(id, now + opts.registrationLeaseMs);
            result.reserved.add(id);
            changed = true;
          }
        }
        return { value: changed ? stored(leases, registering) : undefined, result };
      }, leader);
    },
    release: (backend, ...ids) => drop(backend, ids, ["leases", "registering"]),
    endRegistrations: async (backend, ids) => void (await drop(backend, ids, ["registering"])),
    holders: (backend) => liveIds(backend, "leases"),
    registering: (backend) => liveIds(backend, "registering"),
  };
  return admission;
}
