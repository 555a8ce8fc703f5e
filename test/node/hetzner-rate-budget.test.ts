// The Hetzner rate budget (backends/hetzner/rate-budget.ts): deletes before creates before reads,
// refill at one request a second, and a 429 that stops every call until the budget has one again.
import { describe, expect, it } from "vitest";
import { DELETE_RESERVE, mayCall, projectedRemaining, readRateHeaders, type RateState } from "../../src/backends/hetzner/rate-budget.ts";

const T = 1_800_000_000_000;
const state = (remaining: number, extra: Partial<RateState> = {}): RateState => ({
  limit: 3600,
  remaining,
  resetAt: T + (3600 - remaining) * 1000,
  seenAt: T,
  ...extra,
});
const headers = (limit: string | null, remaining: string | null, reset: string | null) =>
  new Headers(
    Object.entries({ "RateLimit-Limit": limit, "RateLimit-Remaining": remaining, "RateLimit-Reset": reset }).filter(([, v]) => v !== null) as [
      string,
      string,
    ][],
  );

describe("the Hetzner rate budget", () => {
  it("reads the RateLimit-* headers; none, or a partial set, is no budget", () => {
    expect(readRateHeaders(headers("3600", "3599", String(T / 1000 + 1)), T)).toEqual({ limit: 3600, remaining: 3599, resetAt: T + 1000, seenAt: T });
    expect(readRateHeaders(headers(null, null, null), T)).toBeUndefined();
    expect(readRateHeaders(headers("3600", null, "1"), T)).toBeUndefined();
    expect(readRateHeaders(headers("0", "0", "1"), T)).toBeUndefined();
  });

  it("refills one request a second, up to the limit, and is full at the reset", () => {
    expect(projectedRemaining(state(10), T + 5_000)).toBe(15);
    expect(projectedRemaining(state(3599), T + 60_000)).toBe(3600);
    expect(projectedRemaining(state(0), T + 3_600_000)).toBe(3600);
  });

  it("gives way in order: reads first, then creates; deletes go to the last request", () => {
    const readFloor = 360;
    expect(mayCall("read", state(readFloor + 1), T)).toEqual({ ok: true });
    expect(mayCall("read", state(readFloor), T)).toEqual({ ok: false, retryAt: T + 1000 });
    expect(mayCall("create", state(readFloor), T)).toEqual({ ok: true });
    expect(mayCall("create", state(DELETE_RESERVE + 1), T)).toEqual({ ok: true });
    expect(mayCall("create", state(DELETE_RESERVE), T)).toEqual({ ok: false, retryAt: T + 1000 });
    // The sweep's list stops where reads do, at 10 % left (docs/backends.md): what is left is the deletes' and creates'.
    expect(mayCall("sweep", state(readFloor + 1), T)).toEqual({ ok: true });
    expect(mayCall("sweep", state(readFloor), T)).toEqual({ ok: false, retryAt: T + 1000 });
    expect(mayCall("delete", state(1), T)).toEqual({ ok: true });
    expect(mayCall("delete", state(0), T)).toEqual({ ok: false, retryAt: T + 1000 });
    // A second later the create's request is there again.
    expect(mayCall("create", state(DELETE_RESERVE), T + 1000)).toEqual({ ok: true });
    // Nothing known yet: the first answer tells.
    expect(mayCall("read", undefined, T)).toEqual({ ok: true });
  });

  it("after a 429 no call goes, deletes included, until a request has come back", () => {
    const limited = readRateHeaders(headers("3600", "0", String(T / 1000 + 3600)), T, 429)!;
    expect(limited.blockedUntil).toBe(T + 1000);
    for (const kind of ["delete", "create", "read"] as const) expect(mayCall(kind, limited, T + 999)).toEqual({ ok: false, retryAt: T + 1000 });
    expect(mayCall("delete", limited, T + 1000)).toEqual({ ok: true });
    expect(mayCall("create", limited, T + 1000)).toEqual({ ok: false, retryAt: T + (DELETE_RESERVE + 1) * 1000 });
  });
});
