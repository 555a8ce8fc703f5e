// /metrics as it is served with every metric present (a pool, an owner, Forgejo's poller), for the
// tests that check names, types and labels against it: the alert rules, the dashboard, the reference.
import { formatMetrics } from "../../src/observe/metrics.ts";
import type { BackendSnapshot } from "../../src/observe/snapshot.ts";

/** A backend's row of the snapshot: nothing queued or running unless `over` says so. */
export function backendSnapshot(backend: string, over: Partial<BackendSnapshot> = {}): BackendSnapshot {
  return {
    backend,
    capacity: 4,
    slotsInUse: 0,
    registering: 0,
    queued: 0,
    ackPending: 0,
    redelivered: 0,
    waitingForCapacity: 0,
    waitingForQuota: 0,
    pendingAtBackend: 0,
    readyForClaim: 0,
    running: 0,
    delivered: 0,
    ...over,
  };
}

export function everyMetric(): string {
  return formatMetrics({
    stream: { messages: 3, published: 5, acked: 2 },
    backends: [backendSnapshot("pod", { capacity: 5, slotsInUse: 2, queued: 3, running: 2, delivered: 4 })],
    pools: [{ pool: "small", backend: "pod", target: 2, maxRunners: 10, idle: 1, busy: 1, booting: 1, warm: 2, warmByReuse: 1, startup: null }],
    owners: [{ owner: "acme", runners: 2, waitingForCapacity: 1, waitingForQuota: 0 }],
    forgePoll: { failuresTotal: 0, failing: false },
    cloud: [
      {
        backend: "vm",
        driver: "hetzner",
        full: false,
        fullTotal: 1,
        swept: 3,
        rate: { limit: 3600, remaining: 3500 },
        paid: [{ pool: "small", servers: 2, used: 4000, givenUp: 3200 }],
      },
    ],
    cache: [
      {
        repository: "acme/app",
        figures: { hits: 3, misses: 1, bytesIn: 10, bytesOut: 30, evictions: 0, refused: { size: 1 }, entries: 2, bytesStored: 10 },
      },
    ],
  });
}
