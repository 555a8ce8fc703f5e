// Tearing down the runner of a finished assignment, and retrying teardowns that failed from the
// cron tick (never from a repeated request: see TeardownList).
import type { BackendAccess, Basics, ForgeAccess, StoreAccess } from "./context.ts";
import type { Backend } from "../nats/names.ts";
import type { ForgeRunner } from "./forge.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess;

/**
 * Tears down the runner of a finished assignment: at the backend, then in the forge. The forge's runner
 * goes only once the backend workload is gone, so a failed teardown stays visible to the sweep,
 * which retries it (the runner list is the durable to-do list). Without a Gitea runner to keep it
 * visible, a failed backend teardown is listed for the tick (`remember`, on by default). Resolves
 * false when something is left.
 */
export async function releaseRunner(d: Deps, id: string, backend: Backend, giteaRunner: ForgeRunner | undefined, { remember = true } = {}): Promise<boolean> {
  const failed = (reason: unknown) => {
    d.sink.event({ event: "teardown_failed", assignment: id, backend, reason: (reason as Error).message });
    return false;
  };
  try {
    await d.callBackend((signal) => d.runnersFor(backend).teardown(id, signal));
  } catch (err) {
    const sweepSees = giteaRunner !== undefined && d.forge !== undefined && d.forge.listsAtHome(giteaRunner.scope);
    if (remember && !sweepSees) {
      const runner = giteaRunner && d.forge ? { runner: giteaRunner } : {};
      await d
        .withState((s) => s.teardowns.add({ id, backend, since: new Date(d.now()).toISOString(), ...runner }))
        .catch((e) => d.sink.error("listing a failed teardown failed", { reason: (e as Error).name }));
    }
    return failed(err);
  }
  if (giteaRunner === undefined || !d.forge) return true;
  return d.forge.deleteRunner(giteaRunner).then(() => true, failed);
}

/** Teardowns one tick retries at most: each is a backend call, bounded by the invocation's limits. */
export const TEARDOWNS_PER_TICK = 20;

/** Retries the teardowns that failed (oldest first); one that holds now is taken off the list. */
export async function retryTeardowns(d: Deps): Promise<number> {
  const pending = await d.withState((s) => s.teardowns.list(TEARDOWNS_PER_TICK));
  let done = 0;
  await Promise.all(
    pending.map(async (t) => {
      if (!(await releaseRunner(d, t.id, t.backend, t.runner, { remember: false }))) return;
      await d.withState((s) => s.teardowns.done(t.id));
      d.sink.event({ event: "teardown_retried", assignment: t.id, backend: t.backend, reason: `failed first at ${t.since}` });
      done++;
    }),
  );
  return done;
}
