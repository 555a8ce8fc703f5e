// An in-memory wait set for policy tests: entries by backend in arrival order, message ids kept
// as JetStream's duplicate window keeps them, and every request named in `calls`.
import type { Backend } from "../../src/nats/names.ts";
import type { WaitEntry, WaitHead, WaitSet } from "../../src/state/wait-set.ts";

export function memoryWaitSet() {
  let seq = 0;
  const entries: { backend: Backend; head: WaitHead }[] = [];
  const ids = new Set<string>();
  const calls: string[] = [];
  const asked: Backend[] = [];
  let onRemove: () => Promise<void> = async () => undefined;
  const of = (backend: Backend) => entries.filter((e) => e.backend === backend).map((e) => e.head);
  const set: WaitSet = {
    async add(backend, entry, incarnation) {
      const msgId = `wait-${entry.id}-${incarnation}`;
      if (ids.has(msgId)) return undefined;
      ids.add(msgId);
      entries.push({ backend, head: { ...entry, seq: ++seq } });
      return seq;
    },
    async any(backend) {
      asked.push(backend);
      calls.push("any");
      return of(backend).length > 0;
    },
    async repositories(backend, limit) {
      calls.push("repositories");
      return [...new Set(of(backend).map((h) => h.repository))].slice(0, limit);
    },
    async headsOf(backend, repositories) {
      calls.push(`headsOf ${repositories.join(",")}`);
      return repositories.flatMap((r) => of(backend).find((h) => h.repository === r) ?? []);
    },
    async oldest(backend, limit) {
      calls.push(`oldest ${limit}`);
      return of(backend).slice(0, limit);
    },
    async next(backend, repository, afterSeq) {
      calls.push(`next ${repository}`);
      return of(backend).find((h) => h.repository === repository && h.seq > afterSeq);
    },
    async republish() {
      return true;
    },
    async remove(s) {
      await onRemove();
      const i = entries.findIndex((e) => e.head.seq === s);
      if (i >= 0) entries.splice(i, 1);
    },
    async removeThrough(backend, s) {
      calls.push(`removeThrough ${s}`);
      await onRemove();
      for (let i = entries.length - 1; i >= 0; i--) if (entries[i]!.backend === backend && entries[i]!.head.seq <= s) entries.splice(i, 1);
    },
    async counts() {
      return new Map();
    },
  };
  return {
    set,
    asked,
    calls,
    entries,
    duringRemove: (fn: () => Promise<void>) => (onRemove = fn),
    /** JetStream's duplicate window passed: every message id put so far is forgotten. */
    windowPassed: () => ids.clear(),
  };
}

export const waitEntry = (id: string, repository = "acme/app"): WaitEntry => ({ id, owner: repository.split("/")[0]!, repository, data: "" });
