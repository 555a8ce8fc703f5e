// reuse: "rebuild": Hetzner bills a server by the started hour, so a server whose job has finished
// is kept (parked) for its pool's next job while its hour lasts, and given to that job by a
// rebuild: a fresh disk from the image and new user_data, whose one-time token is the new job's.
// Nothing of the last job survives (its disk is gone, its token spent). A parked server nothing
// takes is deleted by the sweep before its next hour begins.
import type { HetznerApi } from "./client.ts";
import type { Notes, ServerNote } from "./notes.ts";

const HOUR_MS = 3_600_000;
/** A finished server is parked only with this much of its hour left (else deleted at once). */
export const PARK_MIN_LEFT_MS = 4 * 60_000;
/** The sweep deletes a parked server with less than this left of its hour (it runs every minute). */
export const PARKED_DELETE_LEFT_MS = 3 * 60_000;

/** What is left of the server's current paid hour at `now` (a clock behind Hetzner's reads as its first hour). */
export const hourLeft = (paidFrom: number, now: number) => HOUR_MS - (Math.max(0, now - paidFrom) % HOUR_MS);

/**
 * Takes one of the pool's parked servers and rebuilds it for `userData`: its id, or undefined when
 * none is parked (or every one went meanwhile). Of callers racing for one, one takes it.
 */
export async function takeParked(
  api: HetznerApi,
  notes: Notes,
  backend: string,
  pool: string,
  userData: string,
  now: number,
  signal: AbortSignal,
): Promise<{ serverId: number; image: string; paidFrom: number } | undefined> {
  const parked = (await notes.parked(backend, pool)).filter((p) => hourLeft(p.value.paidFrom, now) > PARKED_DELETE_LEFT_MS);
  // The least of its hour left first: that hour is paid, and would go unused; a job that outlasts it
  // costs the server one more hour, as a new server would.
  parked.sort((a, b) => hourLeft(a.value.paidFrom, now) - hourLeft(b.value.paidFrom, now));
  for (const p of parked) {
    if (!(await notes.take(p.key, p.revision))) continue;
    if (await api.rebuild(p.value.serverId, { image: p.value.image, user_data: userData }, signal)) return p.value;
  }
  return undefined;
}

/** At its job's end: parked for the pool's next job while its hour lasts, or deleted. True when parked. */
export async function parkIfWorthIt(notes: Notes, backend: string, note: ServerNote, now: number): Promise<boolean> {
  if (!note.reuse || hourLeft(note.reuse.paidFrom, now) <= PARK_MIN_LEFT_MS) return false;
  await notes.park(backend, { serverId: note.serverId, pool: note.reuse.pool, image: note.reuse.image, paidFrom: note.reuse.paidFrom, parkedAt: now });
  return true;
}
