// Capacity admission on JetStream's own limits, with no compare-and-set loop and no hot key.
// Each backend has a stream holding one message per admitted assignment (its slot lease), with
// max_msgs = capacity and discard-new: the stream leader refuses the message past capacity, so
// capacity is exact across every invocation and taking a slot is one request. Publishing with
// "no earlier message on this subject" makes a lease idempotent per assignment id; the message's
// own TTL is the lease expiry; a release purges the subject.
//
// Registration reservations ride on the slot: whoever takes a slot asking to register holds the
// reservation, written into the slot message, so the usual pass pays nothing for it. Only when
// that reservation ends early, or a later caller asks again, does the registrations stream
// (one message per id: "open", or "mine" until a time) say who may register.
import { jetstreamManager, type JetStreamManager, type StoredMsg } from "@nats-io/jetstream";
import type { NatsHandle } from "../nats/connection.ts";
import { idOfToken, registrationPrefix, registrationsStream, slotPrefix, slotsStream, subjectToken, type Backend, type NatsNames } from "../names.ts";
import { maybe } from "../layout.ts";
import { isWrongLastSequence, readBatch } from "./kv.ts";

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
  /** Holders and registrations together, in two requests whatever the pool's size (up to 1024 slots each). */
  snapshot(backend: Backend): Promise<{ holders: string[]; registering: string[] }>;
}

export interface AdmissionOptions {
  names: NatsNames;
  capacity: Record<Backend, number>;
  leaseTtlMs: number;
  /** A registration that started longer ago than this and stored nothing is presumed dead. */
  registrationLeaseMs: number;
  now?: () => number;
}

/** The slot message: when its taker's registration reservation ends (absent: it asked for none). */
interface Slot {
  registeringUntil?: number;
}
/** The registrations stream's word on an id, for the slot message `slot` (older slots' words are void). */
type Registration = { slot: number } & ({ state: "open" } | { state: "mine"; until: number });

/** JetStream's "maximum messages exceeded": the slots stream is full. */
const POOL_FULL = 10077;

export function createAdmission(handle: NatsHandle, opts: AdmissionOptions): Admission {
  const now = opts.now ?? Date.now;
  let manager: Promise<JetStreamManager> | undefined;
  const jsm = () => (manager ??= jetstreamManager(handle.nc, { checkAPI: false }));
  const slots = (backend: Backend) => slotsStream(opts.names, backend);
  const registrations = registrationsStream(opts.names);
  const slotSubject = (backend: Backend, id: string) => `${slotPrefix(opts.names, backend)}.${subjectToken(id)}`;
  const regSubject = (backend: Backend, id: string) => `${registrationPrefix(opts.names, backend)}.${subjectToken(id)}`;
  /** A message TTL as JetStream takes it: whole seconds, rounded up. */
  const ttl = (ms: number) => `${Math.ceil(ms / 1_000)}s`;

  /** Publishes `value` if the subject's last message is `expected` (0: none): "taken", already "held", or the pool is "full". */
  const put = async (subject: string, value: object, ttlMs: number, expected = 0): Promise<"taken" | "held" | "full"> => {
    try {
      await handle.js.publish(subject, JSON.stringify(value), { expect: { lastSubjectSequence: expected }, ttl: ttl(ttlMs) });
      return "taken";
    } catch (err) {
      if (isWrongLastSequence(err)) return "held";
      if ((err as { code?: unknown }).code === POOL_FULL) return "full";
      throw err;
    }
  };
  const last = async (stream: string, subject: string) => (await maybe(async () => (await jsm()).direct.getMessage(stream, { last_by_subj: subject }))) ?? null;
  const purge = async (stream: string, subject: string) => (await maybe(async () => (await jsm()).streams.purge(stream, { filter: subject })))?.purged ?? 0;
  /** Last message of every subject under `prefix`, by id; none when the stream is missing. */
  const lastOfAll = async (stream: string, prefix: string): Promise<Map<string, StoredMsg>> => {
    const messages = (await maybe(async () => readBatch(handle, stream, { multi_last: [`${prefix}.>`] }))) ?? [];
    return new Map(messages.map((m) => [idOfToken(m.subject.slice(prefix.length + 1)), m]));
  };
  /** Whether a reservation is live, from the slot message and the registrations stream's word on it. */
  const registeringNow = (slot: StoredMsg, reg: StoredMsg | null | undefined) => {
    const word = reg?.json<Registration>();
    if (word && word.slot === slot.seq) return word.state === "mine" && word.until > now();
    return (slot.json<Slot>().registeringUntil ?? 0) > now();
  };
  /** A later caller's reservation: granted when none is live, against the registrations stream's last word. */
  const reserveAgain = async (backend: Backend, id: string): Promise<boolean> => {
    const [slot, reg] = await Promise.all([last(slots(backend), slotSubject(backend, id)), last(registrations, regSubject(backend, id))]);
    if (!slot || registeringNow(slot, reg)) return false;
    const mine: Registration = { slot: slot.seq, state: "mine", until: now() + opts.registrationLeaseMs };
    return (await put(regSubject(backend, id), mine, opts.registrationLeaseMs, reg?.seq ?? 0)) === "taken";
  };

  const admission: Admission = {
    async acquire(backend, id) {
      return (await admission.acquireMany(backend, [id])).admitted.has(id);
    },
    async acquireMany(backend, ids, reserve = new Set()) {
      const result: AdmissionResult = { admitted: new Set(), reserved: new Set() };
      if (opts.capacity[backend] <= 0) return result;
      // Sent together on one connection: the stream leader takes them in order.
      const outcomes = await Promise.all(
        ids.map((id) => put(slotSubject(backend, id), reserve.has(id) ? { registeringUntil: now() + opts.registrationLeaseMs } : {}, opts.leaseTtlMs)),
      );
      await Promise.all(
        ids.map(async (id, i) => {
          if (outcomes[i] === "full") return;
          result.admitted.add(id);
          if (reserve.has(id) && (outcomes[i] === "taken" || (await reserveAgain(backend, id)))) result.reserved.add(id);
        }),
      );
      // Sets keep insertion order: admitted in the order asked.
      return { admitted: new Set(ids.filter((id) => result.admitted.has(id))), reserved: new Set(ids.filter((id) => result.reserved.has(id))) };
    },
    async release(backend, ...ids) {
      // The count is asked alongside the purges, not after them: one round trip instead of two.
      const [freed, info] = await Promise.all([
        Promise.all(ids.map(async (id) => (await Promise.all([purge(slots(backend), slotSubject(backend, id)), purge(registrations, regSubject(backend, id))]))[0])),
        maybe(async () => (await jsm()).streams.info(slots(backend))),
      ]);
      const count = freed.reduce((a, b) => a + b, 0);
      // A hint for an eager pass. Read before the purge, the count makes a pool `count` short of
      // full look full: an extra pass at worst; a full pool is never missed.
      return count > 0 && (info?.state.messages ?? 0) + count >= opts.capacity[backend];
    },
    async endRegistrations(backend, ids) {
      await Promise.all(
        ids.map(async (id) => {
          const slot = await last(slots(backend), slotSubject(backend, id));
          if (slot) await handle.js.publish(regSubject(backend, id), JSON.stringify({ slot: slot.seq, state: "open" } satisfies Registration), { ttl: ttl(opts.leaseTtlMs) });
        }),
      );
    },
    async holders(backend) {
      const info = await maybe(async () => (await jsm()).streams.info(slots(backend), { subjects_filter: `${slotPrefix(opts.names, backend)}.>` }));
      return Object.keys(info?.state.subjects ?? {}).map((s) => idOfToken(s.slice(slotPrefix(opts.names, backend).length + 1)));
    },
    async registering(backend) {
      return (await admission.snapshot(backend)).registering;
    },
    async snapshot(backend) {
      const [taken, words] = await Promise.all([lastOfAll(slots(backend), slotPrefix(opts.names, backend)), lastOfAll(registrations, registrationPrefix(opts.names, backend))]);
      return { holders: [...taken.keys()], registering: [...taken].filter(([id, slot]) => registeringNow(slot, words.get(id))).map(([id]) => id) };
    },
  };
  return admission;
}
