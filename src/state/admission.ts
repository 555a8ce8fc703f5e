// Capacity admission on JetStream's own limits, with no compare-and-set loop and no hot key.
// Each backend has a stream holding one message per admitted assignment (its slot lease), with
// max_msgs = capacity and discard-new: the stream leader refuses the message past capacity, so
// capacity is exact across every invocation and taking a slot is one request. Publishing with
// "no earlier message on this subject" makes a lease idempotent per assignment id; the message's
// own TTL is the lease expiry; a release purges the subject.
//
// A runner pool with a cap has a slots stream of its own: a runner takes its pool's slot, then its
// backend's, and gives the first back when the second is refused; each stream refuses the one past
// its cap, so both caps hold at every instant. A job that several pools can run tries them in turn
// (spill-over), the next one only once the one before refused it.
//
// Registration reservations ride on the slot (registrations.ts).
import type { NatsHandle } from "../nats/connection.ts";
import { capacityOf } from "../model/states.ts";
import { idOfToken, poolSlotPrefix, poolSlotsStream, slotPrefix, slotsStream, subjectToken, type Backend, type NatsNames, slotSubject } from "../nats/names.ts";
import { maybe } from "../nats/layout.ts";
import { createStreamOps } from "./stream-ops.ts";
import { createRegistrations } from "./registrations.ts";
import { createTurnSlots, type TurnSlots } from "./turn-slots.ts";

export interface AdmissionResult {
  admitted: Set<string>;
  /** Of `reserve`, the ids this caller may register a runner for now. */
  reserved: Set<string>;
}

/** Where a runner runs: its backend, and its pool when it has one. */
export interface Placement {
  backend: Backend;
  pool?: string;
  /** Its job's repository, lower case: a release gives its QUOTAS places back (quotas/). */
  repository?: string;
}

/** An id and the places it may run, tried in order. */
export interface Candidate {
  id: string;
  places: readonly Placement[];
}

/** Admission pool of one deployment: capacity per backend, enforced across every invocation. */
export interface Admission {
  /** True when `id` holds a slot (already, or newly granted). */
  acquire(backend: Backend, id: string): Promise<boolean>;
  /** Admits what capacity allows, in order, and reserves runner registration for admitted `reserve` ids. */
  acquireMany(backend: Backend, ids: readonly string[], reserve?: ReadonlySet<string>): Promise<AdmissionResult>;
  /**
   * Admits each candidate at the first of its places with room in its pool and its backend, in
   * order; `admitted` says where. Reserves runner registration for admitted `reserve` ids.
   * `fullBackends`: backends that refused a slot themselves (not a pool's cap) during the call.
   */
  placeMany(
    candidates: readonly Candidate[],
    reserve?: ReadonlySet<string>,
    opts?: PlaceOptions,
  ): Promise<{ admitted: Map<string, Placement>; reserved: Set<string>; fullBackends: Set<Backend> }>;
  /**
   * Frees the slots (backend and pool) of `ids` at `place`; ids holding none are ignored. Their
   * registration reservations go with them: a word is void once its slot is gone (a later slot
   * voids older words), and expires with its lease. Resolves true when a slot was freed in a full
   * backend or pool, or while jobs wait (`anyWaiting`): someone may be waiting for it.
   */
  release(place: Backend | Placement, ...ids: string[]): Promise<boolean>;
  /**
   * Frees the slots of `ids` again, reading no count: for an end already released once (a
   * repeated completion), which may find a slot that a failed first release left behind.
   */
  releaseAgain(place: Backend | Placement, ...ids: string[]): Promise<void>;
  /** Ends the registration reservations of `ids` (registered or given up), keeping their slots. */
  endRegistrations(backend: Backend, ids: readonly string[]): Promise<void>;
  /** Ids holding an unexpired slot. */
  holders(backend: Backend): Promise<string[]>;
  /** When each holder took its slot (epoch ms), in one request (up to 1024 slots). */
  heldSince(backend: Backend): Promise<Map<string, number>>;
  /** Ids whose runner registration is under way (an unexpired reservation). */
  registering(backend: Backend): Promise<string[]>;
  /** Holders and registrations together, in two requests whatever the pool's size (up to 1024 slots each). */
  snapshot(backend: Backend): Promise<{ holders: string[]; registering: string[] }>;
}

export interface AdmissionOptions {
  names: NatsNames;
  capacity: Record<Backend, number>;
  /** maxRunners of each pool that has one. */
  poolCaps?: ReadonlyMap<string, number>;
  leaseTtlMs: number;
  /** A registration that started longer ago than this and stored nothing is presumed dead. */
  registrationLeaseMs: number;
  now?: () => number;
  /**
   * Whether jobs wait for `backend` (fair share's wait set). A release that freed a slot then
   * says so even when its backend did not look full: two releases at once each see the other's
   * slot gone, and would each conclude nobody waits for theirs.
   */
  anyWaiting?: (backend: Backend) => Promise<boolean>;
  /** Where a turn's slot is handed to its delivery: the isolate's, as the record cache is (a connection's own by default). */
  turnSlots?: TurnSlots<Placement>;
}

export interface PlaceOptions {
  /**
   * A turn given: the slots this call takes are handed to the turns' deliveries in this isolate
   * (turn-slots.ts), whose placeMany then takes no slot and reserves with one publish.
   */
  handOn?: boolean;
  /** The ids whose turn's message this is the first delivery of: only these take a slot handed on. */
  turns?: ReadonlySet<string>;
}

export function createAdmission(handle: NatsHandle, opts: AdmissionOptions): Admission {
  const now = opts.now ?? Date.now;
  const ops = createStreamOps(handle);
  const { publishIf, purge, lastOfAll, jsm } = ops;
  const put = async (subject: string, value: object, ttlMs: number) => (await publishIf(subject, value, ttlMs)).got;
  const registrations = createRegistrations(handle, ops, {
    names: opts.names,
    registrationLeaseMs: opts.registrationLeaseMs,
    leaseTtlMs: opts.leaseTtlMs,
    now,
  });
  const slots = (backend: Backend) => slotsStream(opts.names, backend);
  const poolCaps = opts.poolCaps ?? new Map<string, number>();
  const poolSubject = (pool: string, id: string) => `${poolSlotPrefix(opts.names, pool)}.${subjectToken(id)}`;
  /** The capped pool of a place, if it has one. */
  const cappedPool = (place: Placement) => (place.pool !== undefined && poolCaps.has(place.pool) ? place.pool : undefined);
  const handed = opts.turnSlots ?? createTurnSlots<Placement>();

  /** Where a place's slots are: its backend's, and its pool's when that pool has a cap (maxRunners). */
  const slotsOf = (place: Backend | Placement): { backend: Backend; pool: string | undefined } =>
    typeof place === "string" ? { backend: place, pool: undefined } : { backend: place.backend, pool: cappedPool(place) };
  /** Purges the backend's (and the pool's) slot of each id: how many of each were held. */
  const freeSlots = (backend: Backend, pool: string | undefined, ids: readonly string[]) =>
    Promise.all(
      ids.map(async (id) => {
        const [slot, poolSlot] = await Promise.all([
          purge(slots(backend), slotSubject(opts.names, backend, id)),
          pool !== undefined ? purge(poolSlotsStream(opts.names, pool), poolSubject(pool, id)) : 0,
        ]);
        return { slot, poolSlot };
      }),
    );

  const admission: Admission = {
    async acquire(backend, id) {
      return (await admission.acquireMany(backend, [id])).admitted.has(id);
    },
    async acquireMany(backend, ids, reserve = new Set()) {
      const { admitted, reserved } = await admission.placeMany(
        ids.map((id) => ({ id, places: [{ backend }] })),
        reserve,
      );
      return { admitted: new Set(admitted.keys()), reserved };
    },
    async placeMany(candidates, reserve = new Set(), { handOn = false, turns = new Set() } = {}) {
      const placed = new Map<string, Placement>();
      const reserved = new Set<string>();
      const fullBackends = new Set<Backend>();
      /** Takes the pool's slot, then the backend's; gives the first back when the second is refused. */
      const take = async (id: string, place: Placement): Promise<"taken" | "held" | "full"> => {
        if (capacityOf(opts.capacity, place.backend) <= 0) {
          fullBackends.add(place.backend);
          return "full";
        }
        const pool = cappedPool(place);
        if (pool !== undefined && (await put(poolSubject(pool, id), {}, opts.leaseTtlMs)) === "full") return "full";
        const slot = await publishIf(slotSubject(opts.names, place.backend, id), reserve.has(id) ? registrations.onSlot() : {}, opts.leaseTtlMs);
        if (handOn && slot.seq !== undefined) handed.hand(id, { seq: slot.seq, place }, now());
        if (slot.got !== "full") return slot.got;
        fullBackends.add(place.backend);
        if (pool !== undefined) await purge(poolSlotsStream(opts.names, pool), poolSubject(pool, id));
        return slot.got;
      };
      // A turn's delivery: its slot was taken for it a moment ago, here.
      const theirs = candidates.flatMap((c) => {
        const slot = turns.has(c.id) ? handed.take(c.id, now()) : undefined;
        return slot ? [{ c, slot }] : [];
      });
      await Promise.all(
        theirs.map(async ({ c, slot }) => {
          placed.set(c.id, slot.place);
          if (reserve.has(c.id) && (await registrations.reserveHanded(slot.place.backend, c.id, slot.seq))) reserved.add(c.id);
        }),
      );
      // A round tries each candidate's next place, all sent together on one connection: the
      // stream leaders take them in order. A candidate refused everywhere stays out.
      for (let round = candidates.filter((c) => !placed.has(c.id)).map((c) => ({ c, k: 0 })); round.length;) {
        const outcomes = await Promise.all(round.map(({ c, k }) => take(c.id, c.places[k]!)));
        const next: typeof round = [];
        await Promise.all(
          round.map(async ({ c, k }, i) => {
            if (outcomes[i] === "full") {
              if (k + 1 < c.places.length) next.push({ c, k: k + 1 });
              return;
            }
            const place = c.places[k]!;
            placed.set(c.id, place);
            if (reserve.has(c.id) && (outcomes[i] === "taken" || (await registrations.reserveAgain(place.backend, c.id)))) reserved.add(c.id);
          }),
        );
        round = next;
      }
      // In the order asked.
      const admitted = new Map(candidates.filter((c) => placed.has(c.id)).map((c) => [c.id, placed.get(c.id)!]));
      return { admitted, reserved: new Set(candidates.filter((c) => reserved.has(c.id)).map((c) => c.id)), fullBackends };
    },
    async release(place, ...ids) {
      const { backend, pool } = slotsOf(place);
      const poolStream = pool !== undefined ? poolSlotsStream(opts.names, pool) : undefined;
      // The counts are asked alongside the purges, not after them: one round trip instead of two.
      const [freed, info, poolInfo] = await Promise.all([
        freeSlots(backend, pool, ids),
        maybe(async () => (await jsm()).streams.info(slots(backend))),
        poolStream ? maybe(async () => (await jsm()).streams.info(poolStream)) : undefined,
      ]);
      const count = freed.reduce((a, b) => a + b.slot, 0);
      const poolCount = freed.reduce((a, b) => a + b.poolSlot, 0);
      // A hint for an eager pass. Read before the purge, a count makes a pool `count` short of
      // full look full: an extra pass at worst; a full pool is never missed.
      const backendWasFull = count > 0 && (info?.state.messages ?? 0) + count >= capacityOf(opts.capacity, backend);
      const poolWasFull = poolCount > 0 && (poolInfo?.state.messages ?? 0) + poolCount >= (poolCaps.get(pool!) ?? Infinity);
      if (backendWasFull || poolWasFull) return true;
      return count > 0 && opts.anyWaiting !== undefined && (await opts.anyWaiting(backend));
    },
    async releaseAgain(place, ...ids) {
      const { backend, pool } = slotsOf(place);
      await freeSlots(backend, pool, ids);
    },
    endRegistrations: (backend, ids) => registrations.end(backend, ids),
    async holders(backend) {
      const info = await maybe(async () => (await jsm()).streams.info(slots(backend), { subjects_filter: `${slotPrefix(opts.names, backend)}.>` }));
      return Object.keys(info?.state.subjects ?? {}).map((s) => idOfToken(s.slice(slotPrefix(opts.names, backend).length + 1)));
    },
    async heldSince(backend) {
      const taken = await lastOfAll(slots(backend), slotPrefix(opts.names, backend));
      return new Map([...taken].map(([id, m]) => [id, m.time.getTime()]));
    },
    async registering(backend) {
      return (await admission.snapshot(backend)).registering;
    },
    async snapshot(backend) {
      const [taken, words] = await Promise.all([lastOfAll(slots(backend), slotPrefix(opts.names, backend)), registrations.words(backend)]);
      return { holders: [...taken.keys()], registering: [...taken].filter(([id, slot]) => registrations.live(slot, words.get(id))).map(([id]) => id) };
    },
  };
  return admission;
}
