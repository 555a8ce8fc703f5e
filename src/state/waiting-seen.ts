// Whether anybody waits, as this isolate last saw it: a burst of new jobs' eager passes (each asks,
// prepare.ts) mostly comes while the wait set is far from empty, and each would ask again. A "yes"
// seen here (an entry this isolate put in, a read that found one) answers for WAITING_SEEN_MS, for
// as long as an entry it saw has not been taken out here; a "no" is never kept.
//
// Only a "yes" is kept because of what each answer does: "somebody waits" sends a new job into the
// wait set behind them, "nobody" lets it take a free slot at once. A stale "yes" (another isolate
// gave the last turn meanwhile) makes a job wait that need not: its pass put it in, so it reads the
// holders and gives it a free slot's turn at once (admitWaiting's `joined`), a few operations more
// and no job passed. A stale "no" would let a new job past one that waits: never kept.
//
// The entries seen are known by sequence where the read names them (a put, a glance, a head): a
// turn given here takes out one of them, and the others still answer. A "yes" that names none (a
// question answered, a repositories' list) goes with any removal here, which may have emptied it.
import type { Backend } from "../nats/names.ts";
import type { WaitSet } from "./wait-set.ts";

/** How long a "yes" answers for the isolate (the length of a burst of webhooks, as the offer's hand-off). */
export const WAITING_SEEN_MS = 2_000;
/** Sequences taken out here that a read under way at the time may still name (a pass's worth, and more). */
const GONE_KEPT = 1_024;

export interface WaitingSeen {
  /** Somebody waited for `backend` at `at` (this isolate wrote or read an entry): the entries' sequences, where known. */
  saw(backend: Backend, at: number, seqs?: readonly number[]): void;
  /** An entry was taken out here: it answers no more, nor does a "yes" that named no entry. */
  gone(seq: number): void;
  /** Every entry of `backend` up to `seq` was taken out here. */
  goneThrough(backend: Backend, seq: number): void;
  /** Forgets what was seen of `backend` (a read found nobody), or of every backend. */
  forget(backend?: Backend): void;
  /** Whether a "yes" seen within WAITING_SEEN_MS of `now` answers for `backend`. */
  seen(backend: Backend, now: number): boolean;
  /** Counts a question about `backend` sent (+1) or answered (-1) here. */
  asked(backend: Backend, delta: 1 | -1): void;
  /**
   * Whether a question about `backend` is under way here. A pass that starts meanwhile asks only
   * once its pull brought a new job: most often the pass under way took every new job, and when
   * not, its "yes" answers from here (its "no" never does: it may be older than the pass).
   */
  asking(backend: Backend): boolean;
}

interface Seen {
  at: number;
  /** Entries seen, by sequence, not taken out here since. */
  seqs: Set<number>;
  /** A "yes" that named no entry. */
  unnamed: boolean;
}

export function createWaitingSeen(): WaitingSeen {
  const byBackend = new Map<Backend, Seen>();
  const gone = new Set<number>();
  const goneThrough = new Map<Backend, number>();
  const questions = new Map<Backend, number>();
  return {
    asked: (backend, delta) => void questions.set(backend, Math.max(0, (questions.get(backend) ?? 0) + delta)),
    asking: (backend) => (questions.get(backend) ?? 0) > 0,
    saw(backend, at, seqs) {
      const live = seqs?.filter((seq) => !gone.has(seq) && seq > (goneThrough.get(backend) ?? 0));
      // Every entry it named was taken out here meanwhile (a read under way during the removal).
      if (live && !live.length) return;
      const s = byBackend.get(backend) ?? { at, seqs: new Set<number>(), unnamed: false };
      s.at = Math.max(at, s.at);
      if (live) for (const seq of live) s.seqs.add(seq);
      else s.unnamed = true;
      byBackend.set(backend, s);
    },
    gone(seq) {
      gone.add(seq);
      if (gone.size > GONE_KEPT) gone.delete(gone.values().next().value!);
      for (const s of byBackend.values()) {
        s.seqs.delete(seq);
        s.unnamed = false;
      }
    },
    goneThrough(backend, seq) {
      goneThrough.set(backend, Math.max(seq, goneThrough.get(backend) ?? 0));
      const s = byBackend.get(backend);
      if (!s) return;
      for (const known of s.seqs) if (known <= seq) s.seqs.delete(known);
      s.unnamed = false;
    },
    forget: (backend) => (backend === undefined ? byBackend.clear() : void byBackend.delete(backend)),
    seen(backend, now) {
      const s = byBackend.get(backend);
      return s !== undefined && now - s.at <= WAITING_SEEN_MS && now >= s.at && (s.unnamed || s.seqs.size > 0);
    },
  };
}

/** A wait set that remembers what this isolate saw of it, and knows whether a question is under way here. */
export type RememberedWaitSet = WaitSet & Pick<WaitingSeen, "asking">;

/** `set`, answering `any` from what this isolate saw (`seen`), and telling it what its reads and writes see. */
export function rememberWaiting(set: WaitSet, seen: WaitingSeen, now: () => number): RememberedWaitSet {
  const note = (backend: Backend, somebody: boolean, seqs?: readonly number[]) => (somebody ? seen.saw(backend, now(), seqs) : seen.forget(backend));
  return {
    ...set,
    asking: (backend) => seen.asking(backend),
    async add(backend, entry, wait) {
      // A put dropped as a repeat says nothing: the entry it repeats may have had its turn since.
      const stored = await set.add(backend, entry, wait);
      if (stored !== undefined) seen.saw(backend, now(), [stored]);
      return stored;
    },
    async any(backend) {
      if (seen.seen(backend, now())) return true;
      seen.asked(backend, 1);
      try {
        const somebody = await set.any(backend);
        note(backend, somebody);
        return somebody;
      } finally {
        seen.asked(backend, -1);
      }
    },
    async repositories(backend, limit) {
      const found = await set.repositories(backend, limit);
      note(backend, found.length > 0);
      return found;
    },
    async oldest(backend, limit) {
      const found = await set.oldest(backend, limit);
      note(
        backend,
        found.length > 0,
        found.map((h) => h.seq),
      );
      return found;
    },
    async next(backend, repository, afterSeq) {
      const head = await set.next(backend, repository, afterSeq);
      if (head) seen.saw(backend, now(), [head.seq]);
      return head;
    },
    async remove(seq) {
      try {
        await set.remove(seq);
      } finally {
        // Counted after it, so that a read that saw the entry while it went counts for nothing.
        seen.gone(seq);
      }
    },
    async removeThrough(backend, seq) {
      try {
        await set.removeThrough(backend, seq);
      } finally {
        seen.goneThrough(backend, seq);
      }
    },
  };
}
