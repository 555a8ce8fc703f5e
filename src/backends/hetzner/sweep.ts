// The hetzner driver's orphan sweep, on every cron tick: it lists this dispatcher's servers (its
// instance's label selector, every page) and deletes those nothing needs: a server whose
// assignment has ended (its teardown failed), one unknown past a grace, and any server older than
// its pool's maxLifetimeMs (counted from its current job's start). A server its note does not name
// yet, of a live assignment (a create answered to a Worker that died), is adopted, never deleted as
// unknown. A list not read to its end deletes nothing: what is missing from it is not gone.
import { deleteEach, inBatches, judgeWorkload, lifetimeOf, type Known, type SweepVerdict } from "../cloud-sweep.ts";
import type { TickAsk } from "../driver-module.ts";
import { RateBudgetExhausted, type HetznerApi, type HetznerServer } from "./client.ts";
import { DELETE_CLAIM_MS, type Notes, type ParkedRead, type ServerNote } from "./notes.ts";
import { bootMark, instanceSelector, isOurs, LABELS } from "./server-body.ts";
import { hourLeft, paidAtDelete, PARKED_DELETE_LEFT_MS } from "./reuse.ts";

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
  known: Known | undefined,
  record: { ended: boolean } | undefined,
  lifetimes: ReadonlyMap<string, number>,
) => judgeWorkload({ created: server.created, pool: server.labels[LABELS.pool] }, now, known, record, lifetimes);

/**
 * What the sweep knows of a listed server from the notes: noted (its note names it), adoptable (its
 * assignment's create was asked and the server carries that create's bootstrap mark, or there is no
 * note and its label is a plain assignment id), or superseded (its note names another server).
 */
export function knowServer(s: HetznerServer, label: string | undefined, note: ServerNote | undefined, mark: string | undefined): Known | undefined {
  if (!label) return undefined;
  if (note?.serverId === s.id) return { id: note.id, how: "noted", since: note.createdAt };
  if (note && note.serverId === undefined && note.creating !== undefined && mark !== undefined && s.labels[LABELS.boot] === mark)
    return { id: note.id, how: "adoptable" };
  if (note) return { id: note.id, how: "superseded" };
  // No note at all (it was never written): a plain label is the assignment's id itself (objectNames).
  return label.includes("--") ? undefined : { id: label, how: "adoptable" };
}

export async function sweepServers(
  api: HetznerApi,
  notes: Notes,
  backend: string,
  instance: string,
  now: () => number,
  ask: TickAsk,
): Promise<{ listed: number; deleted: number; paid: ReturnType<typeof paidAtDelete>[] }> {
  // Throws when any page fails: then nothing is deleted.
  // Its list spends the budget as a create does: it is what finds the servers to delete.
  const servers = (await api.listAll(instanceSelector(instance), ask.signal, "sweep")).filter((s) => isOurs(s.labels, instance, backend));
  const listedParked = await notes.parked(backend, undefined, true);
  const parked = new Map(listedParked.filter((p) => p.value.takenBy === undefined).map((p) => [p.value.serverId, p]));
  // The assignment each runs now: its name's, or, rebuilt for another job (reuse), that job's.
  const runs = await notes.runsOf(
    backend,
    servers.map((s) => s.id),
  );
  // Taken for a job and not yet noted (its pass under way): left alone this sweep.
  const taking = new Set(await settleTakes(notes, listedParked, runs, now()));
  // Deleted by a teardown or a sweep since this list was read (or so lately that it may still be listed): not deleted twice.
  const gone = (s: HetznerServer, read = runs) => {
    const at = read.get(s.id)?.deletedAt;
    return at !== undefined && now() - at < DELETE_CLAIM_MS;
  };
  const live = servers.filter((s) => !parked.has(s.id) && !gone(s, runs));
  const labelOf = (s: HetznerServer) => {
    const r = runs.get(s.id);
    return r && r.deletedAt === undefined ? r.label : s.labels[LABELS.assignment];
  };
  const noteOf = await notes.notesOf(backend, [...new Set(live.flatMap((s) => labelOf(s) ?? []))]);
  const bootMarks = new Map<string, string>();
  for (const { value: n } of noteOf.values()) if (n.creating) bootMarks.set(n.creating, await bootMark(n.creating));
  const known = new Map<number, Known & { label: string }>();
  for (const s of live) {
    const label = labelOf(s);
    const note = label ? noteOf.get(label)?.value : undefined;
    const k = knowServer(s, label, note, note?.creating ? bootMarks.get(note.creating) : undefined);
    if (k) known.set(s.id, { ...k, label: label! });
  }
  const records = await ask.records([...new Set([...known.values()].map((n) => n.id))]);
  const doomed: { s: HetznerServer; reason: string; p?: { key: string; revision: number }; n?: Known & { label: string } }[] = [];
  const adopted: (() => Promise<void>)[] = [];
  for (const s of servers) {
    if (gone(s, runs) || taking.has(s.id)) continue;
    const p = parked.get(s.id);
    const n = known.get(s.id);
    const verdict = p ? judgeParked(s, now(), p.value.paidFrom, ask.lifetimes) : judgeServer(s, now(), n, n && records.get(n.id), ask.lifetimes);
    if (verdict.delete) doomed.push({ s, reason: verdict.reason, ...(p ? { p } : {}), ...(n ? { n } : {}) });
    else if (verdict.adopt && n) adopted.push(() => adopt(notes, backend, s, n, noteOf.get(n.label)?.value, now()));
  }
  await inBatches(adopted);
  // A server found without its note may have been deleted by a teardown between this sweep's reads
  // (its mark is written before its note goes): its index is read again, and a fresh mark spares it.
  const unnoted = doomed.filter((d) => !d.p && d.n?.how !== "noted").map((d) => d.s.id);
  const again = await notes.runsOf(backend, unnoted);
  const spared = new Set(unnoted.filter((id) => gone({ id } as HetznerServer, again)));
  doomed.splice(0, doomed.length, ...doomed.filter((d) => !spared.has(d.s.id)));
  // The deletes' requests are taken from the shared budget at once (one write, not one per delete); what is left over goes back.
  await api.gate.reserve("delete", doomed.length).catch(() => 0);
  const paid: ReturnType<typeof paidAtDelete>[] = [];
  /** One judged server: claimed (parked: taken off the list; noted: its note) before its delete. */
  const deleteOne = async (d: (typeof doomed)[number]): Promise<boolean> => {
    // A parked server is taken off the list first: a job that takes it meanwhile keeps it.
    if (d.p && !(await notes.drop(d.p.key, d.p.revision))) return false;
    // A noted server's note is claimed at the revision read: a teardown that claimed it first deletes it, not this sweep too.
    const read = d.n?.how === "noted" ? noteOf.get(d.n.label) : undefined;
    if (read?.value.deleting !== undefined && now() - read.value.deleting < DELETE_CLAIM_MS) return false;
    if (read && !(await notes.claim(backend, d.n!.label, read, now()))) return false;
    try {
      await ask.call((signal) => api.remove(d.s.id, signal));
    } catch (err) {
      // Failed: the claim goes, so that the next tick (or a teardown) deletes it.
      if (read) await notes.put(backend, d.n!.label, read.value);
      throw err;
    }
    const label = d.n?.label ?? d.s.labels[LABELS.assignment] ?? "";
    if (read) await notes.removeDeleted(backend, label, d.s.id, now());
    else await notes.markDeleted(backend, label, d.s.id, now());
    ask.event("orphan_deleted", { assignment: d.n?.id ?? d.s.name, reason: d.reason });
    paid.push(paidAtDelete(d.s.labels[LABELS.pool], Date.parse(d.s.created) || now(), now()));
    return true;
  };
  // Each delete within its own bound, a few at once, until the tick's time is spent; a budget spent stops them all.
  const swept = await deleteEach(doomed, deleteOne, (failures) => now() < ask.deadline && !failures.some((f) => f instanceof RateBudgetExhausted)).then(
    (deleted) => ({ deleted }),
    (err: unknown) => ({ err }),
  );
  await api.gate.release();
  // Marks of deleted servers no longer listed are dropped (a Hetzner server id is never used again).
  const listed = new Set(servers.map((s) => s.id));
  const marks = await notes.deletedMarks(backend);
  await notes.forget(
    backend,
    [...marks].filter(([id, at]) => !listed.has(id) && now() - at > DELETE_CLAIM_MS).map(([id]) => id),
  );
  if ("err" in swept) throw swept.err;
  return { listed: servers.length, deleted: swept.deleted, paid };
}

/**
 * Parked servers taken for a job: one its note names now (the taker was cut short before its
 * drop) goes off the list; one taken longer ago than DELETE_CLAIM_MS and named by no note (its
 * taker never came back) is offered again, and judged as parked by the next sweep. The ids of
 * the others, which this sweep leaves alone.
 */
async function settleTakes(notes: Notes, listed: readonly ParkedRead[], runs: Map<number, { label: string; deletedAt?: number }>, now: number) {
  const taking: number[] = [];
  for (const p of listed) {
    if (p.value.takenBy === undefined) continue;
    const noted = runs.get(p.value.serverId);
    if (noted && noted.deletedAt === undefined) {
      await notes.drop(p.key, p.revision);
      continue;
    }
    if (now - (p.value.takenAt ?? 0) > DELETE_CLAIM_MS) await notes.untake(p);
    taking.push(p.value.serverId);
  }
  return taking;
}

/** A server whose note was never written, of a live assignment: noted now, its job's lifetime counted from its creation. */
async function adopt(notes: Notes, backend: string, s: HetznerServer, n: Known & { label: string }, note: ServerNote | undefined, now: number) {
  const created = Math.min(now, Date.parse(s.created) || now);
  const reuse = note?.reuse ? { reuse: { ...note.reuse, paidFrom: Date.parse(s.created) || note.reuse.paidFrom } } : {};
  await notes.put(backend, n.label, { id: n.id, serverId: s.id, createdAt: created, ...reuse });
}
