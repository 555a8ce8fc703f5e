// What a reconciliation pass over one backend is given (reconcile/types.ts ProcessDeps), built
// from the dispatcher and the state of its connection: the policy from the configuration, the
// stores, and fair share's wait set where it is on.
import { capacityOf } from "../model/states.ts";
import type { Config } from "./config.ts";
import type { Backend } from "../nats/names.ts";
import type { ProcessDeps } from "../reconcile/process.ts";
import { releaseRunner } from "../domain/teardown.ts";
import { idleWarmCounts, keepsWarm } from "../pools/maintain.ts";
import { hasLimits, shareRules } from "../quotas/config.ts";
import type { Dispatcher, State } from "../domain/context.ts";
import type { DeliveredMessage } from "../nats/pull.ts";
import { withRefusal } from "../state/driver-figures.ts";
import type { LaunchWatch } from "../reconcile/launch-watch.ts";

/**
 * The capacity a turn-giving pass may trust to be full (WaitingDeps.capacity): its backend's,
 * where every pool runs on that backend; none where a waiting job could spill to another.
 */
export function waitingCapacity(config: Pick<Config, "pools" | "capacity">, backend: Backend): { capacity?: number } {
  return config.pools.every((p) => p.backend === backend) ? { capacity: capacityOf(config.capacity, backend) } : {};
}

/** Where the backend's VMs fetch a launch at boot (the cloud drivers), the watch on it, in the driver's words. */
function launchWatchOf(d: Dispatcher, backend: Backend): { launchWatch?: LaunchWatch } {
  const driver = d.config.backends.find((b) => b.backend === backend)?.driver;
  if (driver === "hetzner") return { launchWatch: { thing: "server", cost: "at least a started hour on Hetzner" } };
  if (driver === "ec2") return { launchWatch: { thing: "instance", cost: "by the second on EC2" } };
  return {};
}

/** What one pass over `backend` works with: the dispatcher's verbs and this connection's state. */
export function processDeps(d: Dispatcher, state: State, backend: Backend, held: (ackSubject: string, data: Uint8Array) => DeliveredMessage): ProcessDeps {
  const waitForReuse = new Set(d.config.pools.filter((p) => p.waitForReuseMs > 0).map((p) => p.name));
  return {
    // A Forgejo warm runner takes no job of its own accord: the poller gives it one (forge/forgejo/warm.ts).
    warmGraceMs: d.config.forgejo ? 0 : d.config.warmGraceMs,
    countGiveUp: (pool) => state.startups.countGiveUp(pool),
    ...launchWatchOf(d, backend),
    countLaunchMissed: (pool) => state.startups.countLaunchMissed(pool),
    noteRefusal: (b, { variable, ...refusal }) => state.driverFigures.change(b, (f) => withRefusal(f, variable, { ...refusal, at: d.now() })),
    ...(d.forge?.jobWaiting ? { jobQueued: d.forge.jobWaiting } : {}),
    ...(d.forge?.claimHeld ? { claimHeld: d.forge.claimHeld } : {}),
    warmPools: new Set(d.config.pools.filter(keepsWarm).map((p) => p.name)),
    // Read only when a new job of a pool that keeps warm runners comes by, once for the isolate's passes of a burst.
    takeIdleWarm: (pool, until) => state.warmLook.take(pool, d.now(), until, () => idleWarmCounts(state, d.now(), waitForReuse)),
    backend,
    trustDomain: d.config.trustDomain,
    policy: { retryDelayMs: d.config.retryDelayMs, claimTimeoutMs: d.config.claimTimeoutMs },
    records: state.records,
    admission: state.admission,
    runnersFor: d.runnersFor,
    pools: new Map(d.config.pools.map((p) => [p.name, p])),
    needsIdentity: d.forge !== undefined,
    replicated: d.config.replicas > 1,
    withFreshRecords: (fn) => d.withFreshState((state) => fn(state.records)),
    ...(d.config.fairShare
      ? {
          waiting: {
            set: state.waiting,
            stream: d.config.stream,
            rules: shareRules(d.config.quotas),
            ...(hasLimits(d.config.quotas) ? { ledger: state.quotas } : {}),
            ...waitingCapacity(d.config, backend),
            stallAfterMs: d.config.ackWaitMs,
            held,
          },
        }
      : {}),
    runnerRequest: d.runnerRequest,
    callBackend: d.callBackend,
    endWorkload: (id, backend) => releaseRunner(d, id, backend, undefined),
    sink: d.sink,
    now: d.now,
  };
}
