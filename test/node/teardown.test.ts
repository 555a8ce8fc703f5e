// Tearing down a finished assignment's runner (domain/teardown.ts) over fakes: the forge's runner
// goes only after the backend's workload; a failed backend teardown is listed for the cron tick
// unless the forge's own cleanup lists that runner (and retries it from there).
import { describe, expect, it } from "vitest";
import { releaseRunner } from "../../src/domain/teardown.ts";
import type { Dispatcher } from "../../src/domain/context.ts";

function world({ backendFails, listsAtHome }: { backendFails: boolean; listsAtHome: (scope: string | undefined) => boolean }) {
  const done: string[] = [];
  const d = {
    now: () => Date.parse("2026-12-01T10:00:00.000Z"),
    sink: { event: (e: { event: string }) => done.push(e.event), summary: () => undefined, error: () => undefined },
    callBackend: <T>(fn: (s: AbortSignal) => Promise<T>) => fn(new AbortController().signal),
    runnersFor: () => ({
      teardown: async (id: string) => {
        if (backendFails) throw new Error("backend away");
        done.push(`teardown ${id}`);
      },
    }),
    forge: { deleteRunner: async (r: { id: number }) => void done.push(`delete runner ${r.id}`), listsAtHome },
    withState: async <T>(fn: (s: unknown) => Promise<T>) => fn({ teardowns: { add: async (t: { id: string }) => void done.push(`listed ${t.id}`) } }),
  } as unknown as Dispatcher;
  return { d, done };
}

describe("releaseRunner", () => {
  it("tears the workload down, then deletes the forge's runner", async () => {
    const { d, done } = world({ backendFails: false, listsAtHome: () => true });
    expect(await releaseRunner(d, "a1", "pod", { id: 7 })).toBe(true);
    expect(done).toEqual(["teardown a1", "delete runner 7"]);
  });

  it("a failed teardown keeps the forge's runner; it is listed for the tick only where the forge's cleanup does not list that runner", async () => {
    const home = world({ backendFails: true, listsAtHome: (scope) => scope === undefined });
    expect(await releaseRunner(home.d, "a1", "pod", { id: 7 })).toBe(false);
    expect(home.done).toEqual(["teardown_failed"]);
    const away = world({ backendFails: true, listsAtHome: (scope) => scope === undefined });
    expect(await releaseRunner(away.d, "a1", "pod", { id: 7, scope: "repo:acme/app" })).toBe(false);
    expect(away.done).toEqual(["listed a1", "teardown_failed"]);
    const none = world({ backendFails: true, listsAtHome: () => true });
    expect(await releaseRunner(none.d, "a1", "pod", undefined)).toBe(false);
    expect(none.done).toEqual(["listed a1", "teardown_failed"]);
  });
});
