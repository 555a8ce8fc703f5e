// The failover gap on a 3-node R3 cluster: a publisher sends an assignment every 10 ms, each on a
// connection of its own as a Worker invocation would (failing over across every node's URL); the
// stream's leader gets SIGKILL. The gap is the time from the kill until publishes succeed again.
import { jetstreamManager } from "@nats-io/jetstream";
import { encodeAssignment } from "../src/model/assignment.ts";
import { assignmentSubject } from "../src/nats/names.ts";
import { closeNats, openNats } from "../src/nats/connection.ts";

/**
 * @param {{ cluster: Awaited<ReturnType<typeof import("../scripts/nats-cluster.mjs").startNatsCluster>>, config: import("../src/app/config.ts").Config, seconds?: number }} o
 */
export async function measureFailoverGap({ cluster, config, seconds = 20 }) {
  const settings = { natsServers: cluster.wsUrls, natsAuth: { kind: "none" } };
  const admin = await openNats(settings);
  const jsm = await jetstreamManager(admin.nc);
  const leader = (await jsm.streams.info(config.stream)).cluster?.leader;
  await closeNats(admin.nc);
  const node = cluster.nodeOf(leader);
  if (node < 0) throw new Error(`no leader for ${config.stream}`);
  let killedAt = 0;
  let firstAfter = 0;
  let failed = 0;
  let ok = 0;
  const until = Date.now() + seconds * 1_000;
  const publishing = (async () => {
    for (let n = 0; Date.now() < until && !firstAfter; n++) {
      const started = Date.now();
      try {
        const handle = await openNats(settings);
        try {
          const a = {
            version: 1,
            id: `gap-${n}`,
            backend: "pod",
            workload: `spiffe://${config.trustDomain}/runner/pod/gap-${n}`,
            labels: ["x"],
            createdAt: new Date().toISOString(),
          };
          await handle.js.publish(assignmentSubject(config, "pod"), encodeAssignment(a), { msgID: a.id });
          ok++;
          if (killedAt && started > killedAt) firstAfter = Date.now();
        } finally {
          await closeNats(handle.nc);
        }
      } catch {
        failed++;
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  await new Promise((r) => setTimeout(r, 2_000));
  killedAt = Date.now();
  await cluster.kill(node);
  await publishing;
  await cluster.start(node);
  return { leaderNode: node + 1, gapMs: firstAfter ? firstAfter - killedAt : null, published: ok, failed };
}

/**
 * What one R3 stream's leader sustains here: `concurrency` writers on one held connection, half
 * publishing to the assignments stream, half writing records (a KV put each), for `seconds`.
 * Every write is acknowledged by the leader after a quorum stored it. Writes per second.
 */
export async function measureLeaderRate({ cluster, config, seconds = 5, concurrency = 64 }) {
  const { Kvm } = await import("@nats-io/kv");
  const settings = { natsServers: cluster.wsUrls, natsAuth: { kind: "none" } };
  const handle = await openNats(settings);
  try {
    const kv = await new Kvm(handle.js).open(`${config.stream}_records`);
    const until = Date.now() + seconds * 1_000;
    let writes = 0;
    let failed = 0;
    const started = Date.now();
    await Promise.all(
      Array.from({ length: concurrency }, async (_, w) => {
        for (let n = 0; Date.now() < until; n++) {
          try {
            if (w % 2) await kv.put(`a.rate-${w}-${n % 50}`, "{}");
            else await handle.js.publish(`${config.subjectBase}.rate`, "x");
            writes++;
          } catch {
            failed++;
          }
        }
      }),
    );
    return { writesPerSec: (writes / (Date.now() - started)) * 1_000, failed, concurrency };
  } finally {
    await closeNats(handle.nc);
  }
}
