// Runner registration reservations: one Gitea registration per assignment, whatever fails. They
// ride on the slot: whoever takes a slot asking to register holds the reservation, written into
// the slot message, so the usual pass pays nothing for it. Only when that reservation ends early,
// or a later caller asks again, does the registrations stream (one message per id: "open", or
// "mine" until a time) say who may register. A word names the slot message it is about: a word
// about an older slot of the same id counts for nothing. Each word is written expecting the last
// one read, so of two callers that read the same word one gets the reservation.
import type { StoredMsg } from "@nats-io/jetstream";
import { registrationPrefix, registrationsStream, slotsStream, subjectToken, type Backend, type NatsNames, slotSubject } from "../nats/names.ts";
import type { NatsHandle } from "../nats/connection.ts";
import { ttl, type StreamOps } from "./stream-ops.ts";

/** The slot message: when its taker's registration reservation ends (absent: it asked for none). */
export interface Slot {
  registeringUntil?: number;
}
/** The registrations stream's word on an id, for the slot message `slot` (older slots' words are void). */
type Registration = { slot: number } & ({ state: "open" } | { state: "mine"; until: number });

export interface Registrations {
  /** What a slot message carries for a taker that will register now. */
  onSlot(): Slot;
  /** Whether a reservation is live, from the slot message and the registrations stream's word on it. */
  live(slot: StoredMsg, word: StoredMsg | null | undefined): boolean;
  /** A later caller's reservation: granted when none is live, against the registrations stream's last word. */
  reserveAgain(backend: Backend, id: string): Promise<boolean>;
  /**
   * The reservation of a delivery handed its turn's slot (turn-slots.ts), at sequence `slot`: the
   * first word on `id` (written expecting none), or reserveAgain's when there is one already.
   */
  reserveHanded(backend: Backend, id: string, slot: number): Promise<boolean>;
  /** Ends the reservations of `ids` ("open" for their current slots), keeping the slots. */
  end(backend: Backend, ids: readonly string[]): Promise<void>;
  /** The last word on every id of `backend`. */
  words(backend: Backend): Promise<Map<string, StoredMsg>>;
}

export interface RegistrationOptions {
  names: NatsNames;
  /** A registration that started longer ago than this and stored nothing is presumed dead. */
  registrationLeaseMs: number;
  leaseTtlMs: number;
  now: () => number;
}

export function createRegistrations(handle: NatsHandle, ops: StreamOps, opts: RegistrationOptions): Registrations {
  const { now } = opts;
  const stream = registrationsStream(opts.names);
  const subject = (backend: Backend, id: string) => `${registrationPrefix(opts.names, backend)}.${subjectToken(id)}`;
  const mine = (slot: number): Registration => ({ slot, state: "mine", until: now() + opts.registrationLeaseMs });
  const live: Registrations["live"] = (slot, word) => {
    const w = word?.json<Registration>();
    if (w && w.slot === slot.seq) return w.state === "mine" && w.until > now();
    return (slot.json<Slot>().registeringUntil ?? 0) > now();
  };
  const reserveAgain: Registrations["reserveAgain"] = async (backend, id) => {
    const [slot, word] = await Promise.all([
      ops.last(slotsStream(opts.names, backend), slotSubject(opts.names, backend, id)),
      ops.last(stream, subject(backend, id)),
    ]);
    if (!slot || live(slot, word)) return false;
    return (await ops.publishIf(subject(backend, id), mine(slot.seq), opts.registrationLeaseMs, word?.seq ?? 0)).got === "taken";
  };
  return {
    onSlot: () => ({ registeringUntil: now() + opts.registrationLeaseMs }),
    live,
    reserveAgain,
    async reserveHanded(backend, id, slot) {
      return (await ops.publishIf(subject(backend, id), mine(slot), opts.registrationLeaseMs, 0)).got === "taken" || reserveAgain(backend, id);
    },
    async end(backend, ids) {
      await Promise.all(
        ids.map(async (id) => {
          const slot = await ops.last(slotsStream(opts.names, backend), slotSubject(opts.names, backend, id));
          if (slot) {
            const open: Registration = { slot: slot.seq, state: "open" };
            await handle.js.publish(subject(backend, id), JSON.stringify(open), { ttl: ttl(opts.leaseTtlMs) });
          }
        }),
      );
    },
    words: (backend) => ops.lastOfAll(stream, registrationPrefix(opts.names, backend)),
  };
}
