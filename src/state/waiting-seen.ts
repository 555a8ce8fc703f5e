// Whether anybody waits, as this isolate last saw it: a burst of new jobs' eager passes (each asks,
// prepare.ts) mostly comes while the wait set is far from empty, and each would ask again. A "yes"
// seen here (an entry this isolate put in, a read that found one) answers for WAITING_SEEN_MS; a
// "no" is never kept, and a removal here forgets every "yes" until a read sees one again.
//
// Only a "yes" is kept because of what each answer does: "somebody waits" sends a new job into the
// wait set behind them, "nobody" lets it take a free slot at once. A stale "yes" (another isolate
// gave the last turn meanwhile) makes a job wait that need not: its pass put it in, so it reads the
// holders and gives it a free slot's turn at once (admitWaiting's `joined`), a few operations more
// and no job passed. A stale "no" would let a new job past one that waits: never kept.
import type { Backend } from "../nats/names.ts";
import type { WaitSet } from "./wait-set.ts";

/** How long a "yes" answers for the isolate (the length of a burst of webhooks, as the offer's hand-off). */
export const WAITING_SEEN_MS = 2_000;

export interface WaitingSeen {
  /** Somebody waited for `backend` at `at` (this isolate wrote or read an entry). */
  saw(backend: Backend, at: number): void;
  /** Forgets what was seen of `backend`, or of every backend. */
  forget(backend?: Backend): void;
  /** Whether a "yes" seen within WAITING_SEEN_MS of `now` answers for `backend`. */
  seen(backend: Backend, now: number): boolean;
}

export function createWaitingSeen(): WaitingSeen {
  const lastSeen = new Map<Backend, number>();
  return {
    saw: (backend, at) => void lastSeen.set(backend, Math.max(at, lastSeen.get(backend) ?? at)),
    forget: (backend) => (backend === undefined ? lastSeen.clear() : void lastSeen.delete(backend)),
    seen: (backend, now) => {
      const at = lastSeen.get(backend);
      return at !== undefined && now - at <= WAITING_SEEN_MS && now >= at;
    },
  };
}

/** `set`, answering `any` from what this isolate saw (`seen`), and telling it what its reads and writes see. */
export function rememberWaiting(set: WaitSet, seen: WaitingSeen, now: () => number): WaitSet {
  const note = (backend: Backend, somebody: boolean) => (somebody ? seen.saw(backend, now()) : seen.forget(backend));
  return {
    ...set,
    async add(backend, entry, incarnation) {
      // A put dropped as a repeat says nothing: the entry it repeats may have had its turn since.
      const stored = await set.add(backend, entry, incarnation);
      if (stored) seen.saw(backend, now());
      return stored;
    },
    async any(backend) {
      if (seen.seen(backend, now())) return true;
      const somebody = await set.any(backend);
      note(backend, somebody);
      return somebody;
    },
    async repositories(backend, limit) {
      const found = await set.repositories(backend, limit);
      note(backend, found.length > 0);
      return found;
    },
    async oldest(backend, limit) {
      const found = await set.oldest(backend, limit);
      note(backend, found.length > 0);
      return found;
    },
    async next(backend, repository, afterSeq) {
      const head = await set.next(backend, repository, afterSeq);
      if (head) seen.saw(backend, now());
      return head;
    },
    async remove(seq) {
      try {
        await set.remove(seq);
      } finally {
        // Which backend's entry it was is not known here: a removal may have emptied any of them.
        // Forgotten after it, so that a read that saw the entry while it went counts for nothing.
        seen.forget();
      }
    },
  };
}
