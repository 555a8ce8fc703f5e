// What this isolate last read of its pools' idle warm runners, and which of them it has promised to
// new jobs in their warm grace (reconcile/pool-facts.ts). A burst of webhooks starts a pass per
// job, and each would read every warm position and its runner's record (two requests): one read
// answers for LOOK_MS instead. The promises outlive the read, until the job's grace ends or a warm
// runner of the pool takes a job here, so that two passes of a burst never promise one idle runner
// to two jobs (the second would wait out its grace for nothing, then boot its own).
//
// Only the time a job waits rides on this: a promise kept too long makes a job ask for its own
// runner at once (a warm runner may take its job all the same, see pools/taken.ts), and a read up
// to LOOK_MS old may make a job wait for a runner another isolate just gave a job (at most its
// grace). A read that found none idle is not kept: that would cost a runner, not a wait.

/** How long one read of the warm positions answers for this isolate. */
export const LOOK_MS = 1_000;

export interface WarmLook {
  /**
   * Whether a new job of `pool` may wait for an idle warm runner until `until` (epoch ms): true
   * promises one. `read` gives every pool's idle warm runners now; it is asked at most once per LOOK_MS.
   */
  take(pool: string, now: number, until: number, read: () => Promise<ReadonlyMap<string, number>>): Promise<boolean>;
  /** A warm runner of `pool` took a job here: one promise is kept, and the next take reads again. */
  tookJob(pool: string): void;
}

export function createWarmLook(): WarmLook {
  let look: { at: number; idle: Promise<ReadonlyMap<string, number>> } | undefined;
  /** Each pool's promises, by when each ends, earliest first. */
  const promised = new Map<string, number[]>();
  return {
    async take(pool, now, until, read) {
      if (!look || now - look.at >= LOOK_MS || now < look.at) {
        const fresh = { at: now, idle: read() };
        look = fresh;
        // A failed read is not kept: the next pass reads again.
        fresh.idle.catch(() => (look === fresh ? (look = undefined) : undefined));
      }
      const current = look;
      const idle = (await current.idle).get(pool) ?? 0;
      // A "none idle" is not kept: a warm runner that comes up meanwhile would go unseen, and the
      // job would make a runner of its own (on a cloud, a server and its hour).
      if (idle === 0 && look === current) look = undefined;
      const live = (promised.get(pool) ?? []).filter((end) => end > now);
      if (live.length >= idle) {
        promised.set(pool, live);
        return false;
      }
      promised.set(
        pool,
        [...live, until].sort((a, b) => a - b),
      );
      return true;
    },
    tookJob(pool) {
      promised.set(pool, (promised.get(pool) ?? []).slice(1));
      look = undefined;
    },
  };
}
