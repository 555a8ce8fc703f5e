// Hetzner's rate limit as a budget (3,600 requests an hour per project, refilled one a second):
// what the last answer's RateLimit-* headers said, projected to now, and who may spend it. Deletes
// come first (a server left running is a bill), then creates (a job waits) and the sweep's list
// (it finds what is to be deleted), then status reads, which give way while the budget is low. A 429 stops every call until the reset it names.

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
 * DELETE_RESERVE; reads stop at READ_RESERVE_SHARE of the limit.
 */
export function mayCall(kind: CallKind, s: RateState | undefined, now: number): { ok: true } | { ok: false; retryAt: number } {
  if (!s) return { ok: true };
  if (s.blockedUntil !== undefined && now < s.blockedUntil) return { ok: false, retryAt: s.blockedUntil };
  const floor = kind === "delete" ? 0 : kind === "read" ? Math.max(DELETE_RESERVE, Math.ceil(s.limit * READ_RESERVE_SHARE)) : DELETE_RESERVE;
  const have = projectedRemaining(s, now);
  if (have >= floor + 1) return { ok: true };
  const perMs = s.limit / 3_600_000;
  return { ok: false, retryAt: Math.ceil(now + (floor + 1 - have) / perMs) };
}

/** After a 429 that sent no usable reset: the time one request takes to come back. */
function perRequestRefill(limit: number, remaining: number, resetAt: number, now: number): number {
  if (remaining >= 1) return now;
  const perMs = limit / 3_600_000;
  return Math.min(resetAt, Math.ceil(now + 1 / perMs));
}
