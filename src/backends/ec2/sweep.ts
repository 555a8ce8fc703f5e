// The ec2 driver's orphan sweep, on every cron tick: this dispatcher's instances of this backend,
// every page (a list read in part ends nothing), judged by cloud-sweep.ts. An instance no note
// names yet, of a live assignment, whose ClientToken is its note's attempt (a RunInstances answered
// to a Worker that died), is adopted, never terminated as unknown. An instance its cloud took back
// (StateReason Server.SpotInstanceTermination) whose assignment had not ended is an interruption
// nobody reported: handled as one. Notes are read in batches; each terminate has its own bound.
import type { KV } from "@nats-io/kv";
import { driverNoteKey } from "../../nats/names.ts";
import { manyReader } from "../../state/kv.ts";
import { deleteEach, inBatches, judgeWorkload, type Known } from "../cloud-sweep.ts";
import type { DriverStores, TickAsk } from "../driver-module.ts";
import type { Ec2Api } from "./client.ts";
import type { InstanceNote } from "./note.ts";
import { clientToken, TAGS } from "./run-body.ts";
import type { Ec2Instance } from "./xml.ts";

export const LIVE_STATES = ["pending", "running", "stopping", "stopped"];
/** Listed by the sweep only to find interruptions: nothing is left to end. */
const ENDED_BY_CLOUD = new Set(["shutting-down", "terminated"]);
/** EC2's StateReason code of a Spot instance it took back. */
export const SPOT_TAKEN = "Server.SpotInstanceTermination";

export interface Ec2SweepCtx {
  api: Ec2Api;
  backend: string;
  instance: string;
  now: () => number;
  putNote(kv: KV, label: string, note: InstanceNote): Promise<void>;
}

/** What the notes say of a listed instance: noted, adoptable (its note's attempt made it), or superseded. */
export async function knowInstance(i: Ec2Instance, note: InstanceNote | undefined, instance: string): Promise<Known | undefined> {
  const label = i.tags[TAGS.assignment];
  if (!label) return undefined;
  if (note?.instanceId === i.id) return { id: note.id, how: "noted", since: note.createdAt };
  if (note && note.instanceId === undefined && i.clientToken === (await clientToken(instance, note.id, note.round, note.attempt)))
    return { id: note.id, how: "adoptable" };
  if (note) return { id: note.id, how: "superseded" };
  return label.includes("--") ? undefined : { id: label, how: "adoptable" };
}

export async function sweepInstances(c: Ec2SweepCtx, { kv, readMany, figures }: DriverStores, ask: TickAsk): Promise<{ listed: number; deleted: number }> {
  const filters = [
    { Name: `tag:${TAGS.instance}`, Values: [c.instance] },
    { Name: `tag:${TAGS.backend}`, Values: [c.backend] },
    { Name: "instance-state-name", Values: [...LIVE_STATES, "shutting-down", "terminated"] },
  ];
  const listed = await c.api.describeAll({ Filters: filters }, ask.signal);
  const labels = [...new Set(listed.flatMap((i) => i.tags[TAGS.assignment] ?? []))];
  const found = await manyReader(kv, readMany)<InstanceNote>(labels.map((l) => driverNoteKey(c.backend, l)));
  const noteOf = (label: string | undefined) => (label ? found.get(driverNoteKey(c.backend, label))?.value : undefined);
  const known = new Map<string, Known & { label: string }>();
  for (const i of listed) {
    const k = await knowInstance(i, noteOf(i.tags[TAGS.assignment]), c.instance);
    if (k) known.set(i.id, { ...k, label: i.tags[TAGS.assignment]! });
  }
  const records = await ask.records([...new Set([...known.values()].map((n) => n.id))]);
  for (const i of listed) {
    const n = known.get(i.id);
    if (n?.how !== "noted" || i.stateReason !== SPOT_TAKEN || records.get(n.id)?.ended !== false || !ask.interrupted) continue;
    await ask.interrupted(n.id, new Date(c.now()).toISOString());
    // Its next request asks for a new instance; the next sweep finds this one noted no more.
    const note = noteOf(n.label);
    if (note) await c.putNote(kv, n.label, { id: note.id, round: note.round + 1, attempt: 0, createdAt: c.now() });
  }
  const doomed: { i: Ec2Instance; reason: string; n?: Known & { label: string } }[] = [];
  const adopted: (() => Promise<void>)[] = [];
  for (const i of listed.filter((x) => !ENDED_BY_CLOUD.has(x.state))) {
    const n = known.get(i.id);
    const verdict = judgeWorkload({ created: i.launchTime, pool: i.tags[TAGS.pool] }, c.now(), n, n && records.get(n.id), ask.lifetimes);
    if (verdict.delete) doomed.push({ i, reason: verdict.reason, ...(n ? { n } : {}) });
    else if (verdict.adopt && n) {
      const note = noteOf(n.label) ?? { id: n.id, round: 0, attempt: 0, createdAt: c.now() };
      adopted.push(() => c.putNote(kv, n.label, { ...note, instanceId: i.id, createdAt: Math.min(c.now(), Date.parse(i.launchTime) || c.now()) }));
    }
  }
  await inBatches(adopted);
  // Each terminate within its own bound, a few at once, until the tick's time is spent: what is done stays done.
  // Each terminate within its own bound, a few at once, until the tick's time is spent; a failed one is the next tick's.
  const deleted = await deleteEach(
    doomed,
    async (d) => {
      await ask.call((signal) => c.api.terminate(d.i.id, signal));
      if (d.n?.how === "noted") await kv.purge(driverNoteKey(c.backend, d.n.label));
      ask.event("orphan_deleted", { assignment: d.n?.id ?? d.i.tags[TAGS.assignment] ?? d.i.id, reason: d.reason });
      return true;
    },
    () => c.now() < ask.deadline,
  );
  await figures.change(c.backend, (f) => ({ ...f, swept: f.swept + deleted }));
  return { listed: listed.filter((x) => !ENDED_BY_CLOUD.has(x.state)).length, deleted };
}
