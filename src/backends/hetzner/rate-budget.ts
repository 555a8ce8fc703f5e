// Hetzner's rate limit as a budget (3,600 requests an hour per project, refilled one a second):
// what the last answer's RateLimit-* headers said, projected to now, and who may spend it. Deletes
// come first (a server left running is a bill), then creates (a job waits), then status reads and
// the sweep's list, which give way at 10 % left. A 429 stops every call until the reset it names.
// Who keeps the budget is a RateGate: one invocation's (localGate) or every invocation's (shared-budget.ts).
import { BackendError } from "../../domain/backend.ts";

/** What the API last said of the budget, and when. */
export interface RateState {
  limit: number;
  remaining: number;
  /** Epoch ms at which the budget is full again (RateLimit-Reset, in seconds, read as ms). */
  resetAt: number;
  /** Epoch ms the headers were read at. */
  seenAt: number;
  /** After a 429: no call before this. */
  blockedUntil?: number;
}

export type CallKind = "delete" | "create" | "sweep" | "read";

/** The budget does not allow the call now; `retryAt` is when it will. */
export class RateBudgetExhausted extends BackendError {
  readonly retryAt: number;
  constructor(retryAt: number) {
    super(`Hetzner rate budget spent until ${new Date(retryAt).toISOString()}`, 429);
    this.retryAt = retryAt;
  }
}

/** Where the budget is kept and spent: every call takes its request before it is sent. */
export interface RateGate {
  /** Takes one request for a call of `kind`, or throws RateBudgetExhausted. */
  take(kind: CallKind): Promise<void>;
  /** Takes up to `n` requests for later calls of `kind` at once (a sweep's deletes): how many it got; none throws RateBudgetExhausted. */
  reserve(kind: CallKind, n: number): Promise<number>;
  /** Gives back what was reserved and not spent. */
  release(): Promise<void>;
  /** What an answer's RateLimit-* headers said. */
  seen(state: RateState): Promise<void>;
  /** The budget as last read or seen. */
  state(): RateState | undefined;
}

/** Of the budget, what creates leave for deletes, and what reads leave for both. */
export const DELETE_RESERVE = 5;
export const READ_RESERVE_SHARE = 0.1;

/** The budget from an answer's headers, or undefined when it sent none (not Hetzner's, or a proxy's). */
export function readRateHeaders(headers: Headers, now: number, status?: number): RateState | undefined {
  const limit = Number(headers.get("ratelimit-limit"));
  const remaining = Number(headers.get("ratelimit-remaining"));
  const reset = Number(headers.get("ratelimit-reset"));
  if (!(limit > 0) || !Number.isFinite(remaining) || !Number.isFinite(reset) || headers.get("ratelimit-remaining") === null) return undefined;
  const resetAt = reset * 1000;
  return {
    limit,
    remaining,
    resetAt,
    seenAt: now,
    ...(status === 429 ? { blockedUntil: Math.max(now, perRequestRefill(limit, remaining, resetAt, now)) } : {}),
  };
}

/** The requests there are now: what was left, plus one per 3,600/limit seconds since. */
export function projectedRemaining(s: RateState, now: number): number {
  if (now >= s.resetAt) return s.limit;
  const perMs = s.limit / 3_600_000;
  return Math.min(s.limit, s.remaining + Math.max(0, now - s.seenAt) * perMs);
}

/**
 * Whether a call of `kind` may go now; when not, the epoch ms at which it may. Unknown budget:
 * yes (the first answer says). Deletes keep going to the last request; creates stop at
 * DELETE_RESERVE; reads and the sweep's list stop at READ_RESERVE_SHARE of the limit.
 */
export function mayCall(kind: CallKind, s: RateState | undefined, now: number): { ok: true } | { ok: false; retryAt: number } {
  if (!s) return { ok: true };
  if (s.blockedUntil !== undefined && now < s.blockedUntil) return { ok: false, retryAt: s.blockedUntil };
  const floor = floorOf(kind, s.limit);
  const have = projectedRemaining(s, now);
  if (have >= floor + 1) return { ok: true };
  const perMs = s.limit / 3_600_000;
  return { ok: false, retryAt: Math.ceil(now + (floor + 1 - have) / perMs) };
}

/** What a call of `kind` leaves to the others: deletes nothing, creates DELETE_RESERVE, reads and the sweep's list a tenth. */
export function floorOf(kind: CallKind, limit: number): number {
  if (kind === "delete") return 0;
  return kind === "create" ? DELETE_RESERVE : Math.max(DELETE_RESERVE, Math.ceil(limit * READ_RESERVE_SHARE));
}

/** The budget of one invocation (no shared record): counted before each answer, set from each answer's headers. */
export function localGate(holder: { state: RateState | undefined }, now: () => number): RateGate {
  const prepaid = new Map<CallKind, number>();
  const takeOne = (kind: CallKind) => {
    const may = mayCall(kind, holder.state, now());
    if (!may.ok) throw new RateBudgetExhausted(may.retryAt);
    if (holder.state) holder.state = { ...holder.state, remaining: holder.state.remaining - 1 };
  };
  /** A gate of one invocation answers at once: its promise settles as `fn` returns or throws. */
  const settle = <T>(fn: () => T): Promise<T> => new Promise<T>((resolve) => resolve(fn()));
  return {
    take: (kind) =>
      settle(() => {
        const pre = prepaid.get(kind) ?? 0;
        if (pre > 0) prepaid.set(kind, pre - 1);
        else takeOne(kind);
      }),
    reserve: (kind, n) => settle(() => reserveNow(kind, n)),
    release: () =>
      settle(() => {
        const back = [...prepaid.values()].reduce((a, b) => a + b, 0);
        prepaid.clear();
        if (holder.state) holder.state = { ...holder.state, remaining: holder.state.remaining + back };
      }),
    seen: (state) => settle(() => void (holder.state = state)),
    state: () => holder.state,
  };

  function reserveNow(kind: CallKind, n: number): number {
    let got = 0;
    for (; got < n; got++) {
      try {
        takeOne(kind);
      } catch (err) {
        if (!got) throw err;
        break;
      }
    }
    prepaid.set(kind, (prepaid.get(kind) ?? 0) + got);
    return got;
  }
}

/** After a 429 that sent no usable reset: the time one request takes to come back. */
function perRequestRefill(limit: number, remaining: number, resetAt: number, now: number): number {
  if (remaining >= 1) return now;
  const perMs = limit / 3_600_000;
  return Math.min(resetAt, Math.ceil(now + 1 / perMs));
}
