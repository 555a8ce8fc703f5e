// reuse: "rebuild": Hetzner bills a server by the started hour, so a server whose job has finished
// is kept (parked) for its pool's next job while its hour lasts, and given to that job by a
// rebuild: a fresh disk from the image and new user_data, whose one-time token is the new job's.
// Nothing of the last job survives (its disk is gone, its token spent). A parked server nothing
// takes is deleted by the sweep before its next hour begins. Each step is written before the next
// is asked, so a Worker killed between two of them leaves a server the next pass or the sweep can place.
import type { BootstrapStore } from "../../state/bootstraps.ts";
import type { HetznerApi } from "./client.ts";
import type { Notes, ServerNote } from "./notes.ts";

const HOUR_MS = 3_600_000;
/** A finished server is parked only with this much of its hour left (else deleted at once). */
export const PARK_MIN_LEFT_MS = 4 * 60_000;
/** The sweep deletes a parked server with less than this left of its hour (it runs every minute). */
export const PARKED_DELETE_LEFT_MS = 3 * 60_000;

/** What is left of the server's current paid hour at `now` (a clock behind Hetzner's reads as its first hour). */
export const hourLeft = (paidFrom: number, now: number) => HOUR_MS - (Math.max(0, now - paidFrom) % HOUR_MS);

/** A server of `pool` (none: "-") deleted at `now`: its paid time used, and the rest of its hour given up, in seconds (driver-figures.ts Paid). */
export const paidAtDelete = (pool: string | undefined, paidFrom: number, now: number) => ({
  pool: pool ?? "-",
  used: Math.max(0, now - paidFrom) / 1_000,
  givenUp: hourLeft(paidFrom, now) / 1_000,
});

/** What a rebuild for one assignment works with. */
export interface RebuildCtx {
  api: HetznerApi;
  notes: Notes;
  bootstraps: BootstrapStore;
  backend: string;
  /** The assignment's label (kubernetes/names.ts objectNames). */
  label: string;
  signal: AbortSignal;
}

/** A user_data for the assignment, and the one-time token in it (and its key, which notes name). */
export type Boot = { token: string; userData: string; key: string };

/**
 * Issues a bootstrap for the assignment: `noted` is called with its key before the token exists,
 * so a note names every bootstrap ever issued (and the pass after can revoke it).
 */
export type IssueBoot = (noted: (key: string) => Promise<void>) => Promise<Boot>;

/** The pool whose parked server is taken, its warmUntil (kept in the rebuilt server's note), and the one server a warm runner by reuse is bound to. */
export interface TakeFrom {
  pool: string;
  warmUntil?: number | undefined;
  only?: number | undefined;
}

/**
 * Takes one of the pool's parked servers (`only` that one) and rebuilds it for the assignment
 * `base` describes: true when one was, false when none is parked (or every one went meanwhile).
 * Of callers racing for one, one takes it.
 */
export async function takeParked(
  c: RebuildCtx,
  from: string | TakeFrom,
  base: Omit<ServerNote, "serverId" | "reuse">,
  boot: Boot,
  now: number,
): Promise<boolean> {
  const { pool, warmUntil, only } = typeof from === "string" ? { pool: from } : from;
  const listed = (await c.notes.parked(c.backend, pool, true)).filter((p) => only === undefined || p.value.serverId === only);
  // A take of this assignment's whose pass was cut short before its note named the server: this
  // pass goes on with it (taken again, so that the sweep offering it again meanwhile wins or loses whole).
  const mine = listed.filter((p) => p.value.takenBy === c.label);
  const free = listed.filter((p) => p.value.takenBy === undefined && hourLeft(p.value.paidFrom, now) > PARKED_DELETE_LEFT_MS);
  // The least of its hour left first: that hour is paid, and would go unused; a job that outlasts it
  // costs the server one more hour, as a new server would.
  free.sort((a, b) => hourLeft(a.value.paidFrom, now) - hourLeft(b.value.paidFrom, now));
  for (const p of [...mine, ...free]) {
    const revision = await c.notes.take(p, c.label, now);
    if (revision === null) continue;
    const { serverId, image, paidFrom } = p.value;
    const reuse = { pool, image, paidFrom, ...(warmUntil !== undefined ? { warmUntil } : {}) };
    // `boot` was issued under the create's note (`creating`): the rebuild's note names the same key.
    if (await rebuildFor(c, { ...base, serverId, reuse, rebuilt: true }, boot, { key: p.key, revision })) return true;
  }
  return false;
}

/**
 * A pass found its assignment's rebuild asked but not answered (the last pass was cut short): if
 * the server has not taken that rebuild's bootstrap, it is revoked and the server rebuilt with a new
 * one; if it has, the server is booting this assignment's runner. False when the server is gone.
 */
export async function resumeRebuild(
  c: RebuildCtx,
  note: ServerNote & { rebuilding: string; serverId: number },
  boot: IssueBoot,
  now: number,
): Promise<boolean> {
  const { rebuilding: _asked, ...done } = note;
  if (!(await c.bootstraps.revoke(note.rebuilding))) {
    await c.notes.put(c.backend, c.label, done);
    return true;
  }
  const next = { ...done, createdAt: now };
  return rebuildFor(c, next, await boot((key) => c.notes.put(c.backend, c.label, { ...next, rebuilding: key })));
}

/**
 * The note (naming the bootstrap) is written before the rebuild is asked, and cleared once it is
 * answered. A server gone meanwhile leaves the note as a create's (`creating`): the pass after
 * revokes that bootstrap before it issues another.
 */
async function rebuildFor(c: RebuildCtx, note: ServerNote & { serverId: number }, boot: Boot, taken?: { key: string; revision: number }): Promise<boolean> {
  const key = boot.key;
  await c.notes.put(c.backend, c.label, { ...note, rebuilding: key });
  // Its note names it now: off the parked list (a pass cut short before this leaves it to the sweep, which finds the note).
  if (taken) await c.notes.drop(taken.key, taken.revision);
  if (await c.api.rebuild(note.serverId, { image: note.reuse!.image, user_data: boot.userData }, c.signal)) {
    await c.notes.put(c.backend, c.label, note);
    return true;
  }
  const { serverId, rebuilt: _gone, ...rest } = note;
  await c.notes.unindex(c.backend, serverId);
  await c.notes.put(c.backend, c.label, { ...rest, creating: key });
  return false;
}

/**
 * Whether the server is still this assignment's to park or delete: not when it was rebuilt for
 * another job since (a teardown retried late). One parked already is parked again, to the same key.
 */
export async function ownsServer(notes: Notes, backend: string, label: string, serverId: number): Promise<boolean> {
  const runs = await notes.runs(backend, serverId);
  return runs === undefined || runs === label;
}

/** At its job's end: parked for the pool's next job while its hour lasts, or deleted. True when parked. */
export async function parkIfWorthIt(notes: Notes, backend: string, note: ServerNote & { serverId: number }, now: number): Promise<boolean> {
  // Within its pool's warmUntil of the hour's end it is given up, not parked: its warm runner's end is its delete.
  if (!note.reuse || hourLeft(note.reuse.paidFrom, now) <= Math.max(PARK_MIN_LEFT_MS, note.reuse.warmUntil ?? 0)) return false;
  // A parked server runs no assignment: its index goes first, so that it is never both.
  await notes.unindex(backend, note.serverId);
  await notes.park(backend, { serverId: note.serverId, pool: note.reuse.pool, image: note.reuse.image, paidFrom: note.reuse.paidFrom, parkedAt: now });
  return true;
}
