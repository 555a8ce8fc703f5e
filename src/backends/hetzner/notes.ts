// What the hetzner driver keeps between passes, in the records bucket beside the records: each
// assignment's server (its id, so that teardown needs no lookup, and whether its one status read
// was made), which assignment each server runs now, the servers parked for their pool's next job
// (reuse: "rebuild"). The project's rate budget is kept beside them (shared-budget.ts).
import type { KV } from "@nats-io/kv";
import { driverNoteKey, driverServerKey, driverServerKeys, parkedKey, parkedPrefix } from "../../nats/names.ts";
import { casWrite, deleteAtRevision, manyReader, readJson, type ReadMany, type ReadUnder, type Versioned } from "../../state/kv.ts";

export interface ServerNote {
  /** The assignment's id (the note is kept under its label, kubernetes/names.ts objectNames). */
  id: string;
  /** Absent while a create is asked and not answered (`creating`). */
  serverId?: number;
  /**
   * A create asked, its answer not (yet) read: the key of the one-time bootstrap in its user_data,
   * written before the create. The pass after adopts the server of its name only when that server
   * carries this bootstrap's mark (server-body.ts bootMark); else it revokes it before issuing another.
   */
  creating?: string;
  /** Its pool, where it has one (a rebuilt server's is in `reuse`). */
  pool?: string;
  /** Epoch ms the server was asked for (created, adopted or rebuilt) for this assignment: its job's lifetime counts from here. */
  createdAt: number;
  /** Its one status read was made (the claim is the usual sign that it is up). */
  checked?: boolean;
  /** That read found it running: the runner is up, its claim is awaited. */
  ready?: boolean;
  /** Its pool reuses servers (reuse: "rebuild"): at the end it is parked, not deleted, while its hour lasts. */
  reuse?: { pool: string; image: string; paidFrom: number; warmUntil?: number };
  /**
   * A parked server taken for this assignment, its rebuild asked but not yet answered: the key of
   * the one-time bootstrap in that rebuild's user_data. A pass that finds it (the last one was cut
   * short) revokes that bootstrap and rebuilds again, unless the server has taken it already.
   */
  rebuilding?: string;
  /** Its server is a parked one rebuilt for this assignment (not created for it): how its job's start is counted. */
  rebuilt?: true;
  /** Epoch ms a teardown or the sweep claimed its server's delete (claim): another leaves it alone while the claim is fresh. */
  deleting?: number;
}

/** A claim to delete a server older than this was left by a Worker that died: another may claim it again. */
export const DELETE_CLAIM_MS = 60_000;

/** A server kept for its pool's next job: when its paid hours began, and what it is rebuilt from. */
export interface Parked {
  serverId: number;
  pool: string;
  image: string;
  /** Epoch ms the server was created: its paid hours start there. */
  paidFrom: number;
  parkedAt: number;
  /**
   * Taken for this assignment's label (its rebuild not yet noted): the pass after a take cut short
   * finds its own take here, and a parked list no longer offers it. Gone once its note names it.
   */
  takenBy?: string;
  /** Epoch ms of the take: one left longer than DELETE_CLAIM_MS by a pass that never came back is parked again (sweep.ts). */
  takenAt?: number;
}

/** A parked server as read, with its key and the revision to change it at. */
export type ParkedRead = { key: string; revision: number; value: Parked };

export interface Notes {
  get(backend: string, label: string): Promise<ServerNote | undefined>;
  /** Writes the note and which assignment its server runs. */
  put(backend: string, label: string, note: ServerNote): Promise<void>;
  /** Removes the note, and which assignment `serverId` runs (the caller's: reuse.ts ownsServer). */
  remove(backend: string, label: string, serverId?: number): Promise<void>;
  /**
   * After its server's delete: the note goes, and the server's index says when it was deleted, so
   * that a sweep whose list was read before the delete does not delete it again (sweep.ts).
   */
  removeDeleted(backend: string, label: string, serverId: number, now: number): Promise<void>;
  /** The same mark, the note kept (a late server of an earlier create, deleted while its assignment goes on). */
  markDeleted(backend: string, label: string, serverId: number, now: number): Promise<void>;
  /** The servers deleted (removeDeleted) and when, by id; `forget` drops those marks. */
  deletedMarks(backend: string): Promise<Map<number, number>>;
  forget(backend: string, serverIds: readonly number[]): Promise<void>;
  /** The label of the assignment `serverId` runs now, if any. */
  runs(backend: string, serverId: number): Promise<string | undefined>;
  /** Forgets which assignment `serverId` runs (before it is parked: a parked server runs none). */
  unindex(backend: string, serverId: number): Promise<void>;
  park(backend: string, p: Parked): Promise<void>;
  /** Every parked server of `backend` (of `pool`) not taken, with the revision to take it at; `taken`: the taken ones too. */
  parked(backend: string, pool?: string, taken?: boolean): Promise<ParkedRead[]>;
  /** Takes a parked server for `label`: its new revision for the one caller whose write lands at the revision read, else null. */
  take(read: ParkedRead, label: string, now: number): Promise<number | null>;
  /** Offers a server taken and never noted again (its taker did not come back): true when the write lands at the revision read. */
  untake(read: ParkedRead): Promise<boolean>;
  /** Takes it off the list (the sweep, before its delete; a taker, once its note names the server): true when the delete lands at `revision`. */
  drop(key: string, revision?: number): Promise<boolean>;
  /** For the sweep: which label each server runs (or ran, with when it was deleted), and the note of each label, read in batches. */
  runsOf(backend: string, serverIds: readonly number[]): Promise<Map<number, { label: string; deletedAt?: number }>>;
  notesOf(backend: string, labels: readonly string[]): Promise<Map<string, Versioned<ServerNote>>>;
  /** The note and the revision to claim it at. */
  getAt(backend: string, label: string): Promise<Versioned<ServerNote> | undefined>;
  /**
   * Marks the note `deleting` at the revision read, before its server is deleted: of a teardown and
   * a sweep that both judged the server done, one deletes it, never both. False when another write came first.
   */
  claim(backend: string, label: string, read: Versioned<ServerNote>, now: number): Promise<boolean>;
}

export function createNotes(kv: KV, readMany?: ReadMany, readUnder?: ReadUnder): Notes {
  const many = manyReader(kv, readMany);
  const readParked = async (backend: string, pool?: string): Promise<ParkedRead[]> => {
    // One batch read on the wildcard where the stores give one: listing keys starts a consumer
    // each time, and maintenance asks on every pass.
    if (readUnder) {
      const found = await readUnder(parkedPrefix(backend, pool));
      return [...found].map(([key, read]) => ({ key, revision: read.revision, value: read.value as Parked }));
    }
    const keys: string[] = [];
    for await (const k of await kv.keys(`${parkedPrefix(backend, pool)}.*`)) keys.push(k);
    const found = await Promise.all(keys.map(async (key) => ({ key, read: await readJson<Parked>(kv, key) })));
    return found.flatMap(({ key, read }) => (read ? [{ key, revision: read.revision, value: read.value }] : []));
  };
  return {
    async runsOf(backend, serverIds) {
      const keys = new Map(serverIds.map((id) => [driverServerKey(backend, id), id]));
      const found = await many<{ label: string; deletedAt?: number }>([...keys.keys()]);
      return new Map([...found].map(([k, v]) => [keys.get(k)!, v.value]));
    },
    async removeDeleted(backend, label, serverId, now) {
      await kv.put(driverServerKey(backend, serverId), JSON.stringify({ label, deletedAt: now }));
      await kv.purge(driverNoteKey(backend, label));
    },
    async markDeleted(backend, label, serverId, now) {
      await kv.put(driverServerKey(backend, serverId), JSON.stringify({ label, deletedAt: now }));
    },
    async deletedMarks(backend) {
      const keys: string[] = [];
      for await (const k of await kv.keys(driverServerKeys(backend))) keys.push(k);
      const found = await many<{ label: string; deletedAt?: number }>(keys);
      const out = new Map<number, number>();
      for (const [k, v] of found) if (v.value.deletedAt !== undefined) out.set(Number(k.slice(k.lastIndexOf(".") + 1)), v.value.deletedAt);
      return out;
    },
    async forget(backend, serverIds) {
      await Promise.all(serverIds.map((id) => kv.purge(driverServerKey(backend, id))));
    },
    async getAt(backend, label) {
      return (await readJson<ServerNote>(kv, driverNoteKey(backend, label))) ?? undefined;
    },
    async claim(backend, label, read, now) {
      return (await casWrite(kv, driverNoteKey(backend, label), { ...read.value, deleting: now }, read.revision)) !== null;
    },
    async notesOf(backend, labels) {
      const keys = new Map(labels.map((l) => [driverNoteKey(backend, l), l]));
      const found = await many<ServerNote>([...keys.keys()]);
      return new Map([...found].map(([k, v]) => [keys.get(k)!, v]));
    },
    async get(backend, label) {
      return (await readJson<ServerNote>(kv, driverNoteKey(backend, label)))?.value;
    },
    async put(backend, label, note) {
      if (note.serverId !== undefined) await kv.put(driverServerKey(backend, note.serverId), JSON.stringify({ label }));
      await kv.put(driverNoteKey(backend, label), JSON.stringify(note));
    },
    async remove(backend, label, serverId) {
      await kv.purge(driverNoteKey(backend, label));
      if (serverId !== undefined) await kv.purge(driverServerKey(backend, serverId));
    },
    async runs(backend, serverId) {
      const found = (await readJson<{ label: string; deletedAt?: number }>(kv, driverServerKey(backend, serverId)))?.value;
      return found?.deletedAt === undefined ? found?.label : undefined;
    },
    async unindex(backend, serverId) {
      await kv.purge(driverServerKey(backend, serverId));
    },
    async park(backend, p) {
      await kv.put(parkedKey(backend, p.pool, p.serverId), JSON.stringify(p));
    },
    async parked(backend, pool, taken = false) {
      return (await readParked(backend, pool)).filter((p) => taken || p.value.takenBy === undefined);
    },
    take: (read, label, now) => casWrite(kv, read.key, { ...read.value, takenBy: label, takenAt: now }, read.revision),
    async untake(read) {
      const { takenBy: _by, takenAt: _at, ...offered } = read.value;
      return (await casWrite(kv, read.key, offered, read.revision)) !== null;
    },
    drop: (key, revision) => (revision === undefined ? kv.purge(key).then(() => true) : deleteAtRevision(kv, key, revision)),
  };
}
