// After each poll: a failure is counted (in the object's storage and, for /metrics, in NATS) and
// told as an event, the first of a streak and then once a minute; the first success after it is
// told too. Nothing else follows from a failed poll: no job counts as gone.
import type { Basics, StoreAccess } from "../../domain/context.ts";
import type { PollOutcome } from "./poller.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess;

/** What a failure streak keeps between polls (Durable Object storage). */
interface Streak {
  failuresTotal: number;
  since?: number;
  toldAt?: number;
}

interface SmallStorage {
  get<T>(key: string): Promise<T | undefined>;
  put<T>(key: string, value: T): Promise<void>;
}

const KEY = "health";
const TELL_EVERY_MS = 60_000;

export async function recordPollHealth(d: Deps, storage: SmallStorage, outcome: PollOutcome): Promise<void> {
  const streak = (await storage.get<Streak>(KEY)) ?? { failuresTotal: 0 };
  const now = d.now();
  if (outcome.ok && streak.since === undefined) return;
  let next: Streak;
  if (outcome.ok) {
    d.sink.event({ event: "forgejo_poll_recovered", assignment: "-", backend: undefined, reason: `failing since ${new Date(streak.since!).toISOString()}` });
    next = { failuresTotal: streak.failuresTotal };
  } else {
    const tell = streak.toldAt === undefined || now - streak.toldAt >= TELL_EVERY_MS;
    if (tell) d.sink.event({ event: "forgejo_poll_failed", assignment: "-", backend: undefined, reason: outcome.reason ?? "unknown" });
    next = {
      failuresTotal: streak.failuresTotal + 1,
      since: streak.since ?? now,
      ...(tell ? { toldAt: now } : streak.toldAt !== undefined ? { toldAt: streak.toldAt } : {}),
    };
  }
  await storage.put(KEY, next);
  const health = { failuresTotal: next.failuresTotal, ...(next.since !== undefined ? { failingSince: next.since, reason: outcome.reason ?? "unknown" } : {}) };
  await d.withState((s) => s.forgeHealth.put(health)).catch((err) => d.sink.error("recording the poll's health failed", { reason: (err as Error).name }));
}
