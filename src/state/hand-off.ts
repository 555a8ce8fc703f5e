// A value one step of this isolate leaves for the next, by id, for a moment: an offer's record for
// its message's first delivery (record-cache.ts), a turn's slot for the turn's delivery
// (turn-slots.ts). Taken once, and only within the window; at most `limit` kept, the oldest going
// first (those never taken: their message went to another isolate).

export interface HandOff<T> {
  hand(id: string, value: T, now: number): void;
  /** Once: the value handed for `id` within the window, if any. */
  take(id: string, now: number): T | undefined;
  /** The value handed for `id`, left in place (for its giver to amend). */
  peek(id: string): T | undefined;
}

export function createHandOff<T>(windowMs: number, limit: number): HandOff<T> {
  const handed = new Map<string, { at: number; value: T }>();
  return {
    hand(id, value, now) {
      for (const [k, h] of handed) {
        if (now - h.at <= windowMs && handed.size < limit) break;
        handed.delete(k);
      }
      handed.delete(id);
      handed.set(id, { at: now, value });
    },
    take(id, now) {
      const h = handed.get(id);
      handed.delete(id);
      return h && now - h.at <= windowMs ? h.value : undefined;
    },
    peek: (id) => handed.get(id)?.value,
  };
}
