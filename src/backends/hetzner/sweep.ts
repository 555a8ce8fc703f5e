// The hetzner driver's orphan sweep, on every cron tick: it lists this dispatcher's servers (its
// instance's label selector, every page) and deletes those nothing needs: a server whose
// assignment has ended (its teardown failed), one unknown past a grace, and any server older than
// its pool's maxLifetimeMs. A list not read to its end deletes nothing: what is missing from it is not gone.
import { judgeWorkload, lifetimeOf, type SweepVerdict } from "../cloud-sweep.ts";
import type { TickAsk } from "../driver-module.ts";
import type { HetznerApi, HetznerServer } from "./client.ts";
import type { Notes } from "./notes.ts";
import { instanceSelector, LABELS } from "./server-body.ts";
import { hourLeft, PARKED_DELETE_LEFT_MS } from "./reuse.ts";

/** A parked server goes before its next paid hour begins, and at its lifetime. */
export function judgeParked(server: HetznerServer, now: number, paidFrom: number, lifetimes: ReadonlyMap<string, number>): SweepVerdict {
  const cap = lifetimeOf(server.labels[LABELS.pool], lifetimes);
  if (now - paidFrom > cap) return { delete: true, reason: `parked, older than its lifetime (${Math.round(cap / 60_000)} min)` };
  if (hourLeft(paidFrom, now) < PARKED_DELETE_LEFT_MS) return { delete: true, reason: "parked, nothing took it before its next paid hour" };
  return { delete: false };
}

/** Whether a listed server goes (cloud-sweep.ts judgeWorkload). */
export const judgeServer = (
  server: HetznerServer,
  now: number,
  noted: { id: string } | undefined,
  record: { ended: boolean } | undefined,
  lifetimes: ReadonlyMap<string, number>,
) => judgeWorkload({ created: server.created, pool: server.labels[LABELS.pool] }, now, noted, record, lifetimes);

export async function sweepServers(
  api: HetznerApi,
  notes: Notes,
  backend: string,
  instance: string,
  now: () => number,
  ask: TickAsk,
): Promise<{ listed: number; deleted: number }> {
  // Throws when any page fails: then nothing is deleted.
  // Its list spends the budget as a create does: it is what finds the servers to delete.
  const servers = (await api.listAll(instanceSelector(instance), ask.signal, "sweep")).filter((s) => s.labels[LABELS.backend] === backend);
  const parked = new Map((await notes.parked(backend)).map((p) => [p.value.serverId, p]));
  const noted = new Map<number, { id: string; label: string }>();
  for (const s of servers) {
    if (parked.has(s.id)) continue;
    // The assignment it runs now: its name's, or, rebuilt for another job (reuse), that job's.
    const label = (await notes.runs(backend, s.id)) ?? s.labels[LABELS.assignment];
    const note = label ? await notes.get(backend, label) : undefined;
    if (note && note.serverId === s.id) noted.set(s.id, { id: note.id, label: label! });
  }
  const records = await ask.records([...noted.values()].map((n) => n.id));
  let deleted = 0;
  for (const s of servers) {
    const p = parked.get(s.id);
    const n = noted.get(s.id);
    const verdict = p ? judgeParked(s, now(), p.value.paidFrom, ask.lifetimes) : judgeServer(s, now(), n, n && records.get(n.id), ask.lifetimes);
    if (!verdict.delete) continue;
    // A parked server is taken off the list first: a job that takes it meanwhile keeps it.
    if (p && !(await notes.take(p.key, p.revision))) continue;
    await api.remove(s.id, ask.signal);
    if (n) await notes.remove(backend, n.label, s.id);
    ask.event("orphan_deleted", { assignment: n?.id ?? s.name, reason: verdict.reason });
    deleted++;
  }
  return { listed: servers.length, deleted };
}
