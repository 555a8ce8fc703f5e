// One Hetzner rate budget for every invocation: each call takes its request from a record every
// invocation shares (a compare-and-set on the records bucket), so that calls made at once by many
// invocations never together spend more than RateLimit-Remaining (and the refill of one a second).
// An answer's headers correct the record downward only (the record already counts calls in flight).
// A refused call's retry time is spread, so that invocations held back together do not all come back in the same second.
import { floorOf, mayCall, projectedRemaining, RateBudgetExhausted, type CallKind, type RateGate, type RateState } from "./rate-budget.ts";

/** The shared record, changed by compare-and-set (state/kv.ts casUpdate over the records bucket). */
export interface BudgetStore {
  update<R>(change: (current: RateState | undefined) => { value: RateState | undefined; result: R }): Promise<R>;
}

/** How far a refused call's retry is spread past the time the budget names. */
export const RETRY_SPREAD_MS = 3_000;

export function sharedGate(store: BudgetStore, now: () => number, random: () => number = Math.random): RateGate {
  let last: RateState | undefined;
  const prepaid = new Map<CallKind, number>();
  const refuse = (retryAt: number): never => {
    throw new RateBudgetExhausted(retryAt + Math.floor(random() * RETRY_SPREAD_MS));
  };
  /** Takes up to `n` requests for `kind` in one write: how many it got (none throws). */
  const takeUpTo = async (kind: CallKind, n: number): Promise<number> => {
    const t = now();
    const got = await store.update<number | { ok: false; retryAt: number }>((s) => {
      last = s;
      const may = mayCall(kind, s, t);
      if (!may.ok) return { value: undefined, result: may };
      // Unknown budget (no answer seen yet): the first answer tells; nothing to take from.
      if (!s) return { value: undefined, result: n };
      const granted = Math.max(1, Math.min(n, Math.floor(projectedRemaining(s, t) - floorOf(kind, s.limit))));
      const value = { ...s, remaining: projectedRemaining(s, t) - granted, seenAt: t };
      last = value;
      return { value, result: granted };
    });
    if (typeof got !== "number") return refuse(got.retryAt);
    return got;
  };
  return {
    async take(kind) {
      const pre = prepaid.get(kind) ?? 0;
      // A prepaid request still waits out a 429 this invocation saw.
      if (pre > 0 && !(last?.blockedUntil !== undefined && now() < last.blockedUntil)) {
        prepaid.set(kind, pre - 1);
        return;
      }
      await takeUpTo(kind, 1);
    },
    async reserve(kind, n) {
      if (n <= 0) return 0;
      const got = await takeUpTo(kind, n);
      prepaid.set(kind, (prepaid.get(kind) ?? 0) + got);
      return got;
    },
    async release() {
      const back = [...prepaid.values()].reduce((a, b) => a + b, 0);
      prepaid.clear();
      if (!back) return;
      const t = now();
      await store.update((s) =>
        s
          ? { value: { ...s, remaining: Math.min(s.limit, projectedRemaining(s, t) + back), seenAt: t }, result: undefined }
          : { value: undefined, result: undefined },
      );
    },
    async seen(h) {
      const t = now();
      // What this invocation took and has not spent yet is not in the answer's count, but is in the record's.
      const unspent = [...prepaid.values()].reduce((a, b) => a + b, 0);
      const left = { ...h, remaining: h.remaining - unspent };
      // The record counts every call taken; the answer only says when fewer are left than that (a call not counted, a 429).
      if (h.blockedUntil === undefined && last && left.remaining >= projectedRemaining(last, t) - 1) return;
      await store.update((s) => {
        const value: RateState = s
          ? {
              limit: h.limit,
              resetAt: h.resetAt,
              seenAt: t,
              remaining: Math.min(projectedRemaining(s, t), left.remaining),
              ...blocked(s.blockedUntil, h.blockedUntil, t),
            }
          : left;
        last = value;
        return { value, result: undefined };
      });
    },
    state: () => last,
  };
}

function blocked(a: number | undefined, b: number | undefined, t: number) {
  const until = Math.max(a ?? 0, b ?? 0);
  return until > t ? { blockedUntil: until } : {};
}
