// One turn-giving at a time per wait set within an isolate. Passes that end together (a burst of
// eager passes in the gateway object) would each read the same heads and give the same turns:
// every step done twice, told apart only by compare-and-set and the publish's message id. A pass
// that finds another giving turns asks it for one more round (its own release may have freed a
// slot after that one's last look) and waits; if that round cannot be run (its pass is out of
// time, or it failed), the waiter runs its own. Nothing depends on it for correctness: passes in
// other isolates give turns as before, and each step stays idempotent. Unlike the gateway's
// coalescer (gateway/coalesce.ts), which answers at once and drops a round asked for once its
// runner is out of time, a freed slot's turn is never left to the next trigger here.

/** Runs `give` for `key` unless a run is under way here; `mayRepeat`: whether the caller has time for another round. */
export type TurnGate = (key: string, give: () => Promise<number>, mayRepeat: () => boolean) => Promise<number>;

export function createTurnGate(): TurnGate {
  const inFlight = new Map<string, { again: boolean; done: Promise<void> }>();
  return async (key, give, mayRepeat) => {
    for (let other = inFlight.get(key); other; other = inFlight.get(key)) {
      other.again = true;
      await other.done;
      // Its runner gave another round after we asked: the turns are given.
      if (!other.again) return 0;
    }
    let finish!: () => void;
    const entry = { again: false, done: new Promise<void>((r) => (finish = r)) };
    inFlight.set(key, entry);
    try {
      let given = await give();
      while (entry.again && mayRepeat()) {
        entry.again = false;
        given += await give();
      }
      return given;
    } finally {
      inFlight.delete(key);
      finish();
    }
  };
}
