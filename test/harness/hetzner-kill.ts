// The hetzner driver with the Worker killed at each of its awaits, for the tests that cut it
// (hetzner-killed*.test.ts): each fetch and records-bucket call is numbered, and the `at`-th is
// cut, before it is made or after it with its answer lost; then what the pass after and the sweep
// find, and what a server can boot.
import type { KV } from "@nats-io/kv";
import { expect } from "vitest";
import { BackendError } from "../../src/domain/backend.ts";
import { ORPHAN_GRACE_MS } from "../../src/backends/cloud-sweep.ts";
import { bootOf, readLaunch } from "../../scripts/simulate-hetzner.mjs";
import { aroundKv, hetznerScene, vmRequest, type HetznerScene } from "./hetzner.ts";

export const within = () => AbortSignal.timeout(3_000);

export class Killed extends Error {}
export type Mode = "before" | "after";
/** The records bucket's calls the driver makes (each an await a deploy can cut). */
const KV_CALLS = new Set(["get", "put", "create", "update", "delete", "purge", "keys"]);

/** A scene whose fetch and records-bucket calls are numbered; the `at`-th is cut, before it is made or after. */
export async function killable(scenes: HetznerScene[]) {
  const cut = { n: 0, at: Infinity, mode: "before" as Mode, fired: false };
  // The driver wraps what its fetch throws (a BackendError): the cut is known by `fired`.
  const step = async <T>(call: () => Promise<T>): Promise<T> => {
    const n = ++cut.n;
    if (n === cut.at && cut.mode === "before") throw ((cut.fired = true), new Killed(`killed before call ${n}`));
    const v = await call();
    if (n === cut.at && cut.mode === "after") throw ((cut.fired = true), new Killed(`killed after call ${n}`));
    if (cut.fired) throw new Killed(`call ${n} after the kill`);
    return v;
  };
  const kv = (real: KV) => aroundKv(real, KV_CALLS, step);
  const s = await hetznerScene({}, { fetch: (input, init) => step(() => fetch(input, init)), kv });
  s.clock.t = Date.now();
  scenes.push(s);
  /** Runs `fn` with call `at` cut; the count of calls it made when nothing was cut. */
  const run = async (at: number, mode: Mode, fn: () => Promise<unknown>) => {
    Object.assign(cut, { n: 0, at, mode, fired: false });
    try {
      await fn();
    } catch (err) {
      if (!cut.fired) throw err;
    }
    const n = cut.n;
    Object.assign(cut, { at: Infinity, fired: false });
    return n;
  };
  return { s, run };
}

/** The pass after: the dispatcher accepts again until the driver answers (a BackendError is its usual retry). */
export async function acceptAgain(s: HetznerScene, req: ReturnType<typeof vmRequest>) {
  for (let i = 0; i < 3; i++) {
    try {
      return await s.driver.accept(req, within());
    } catch (err) {
      if (!(err instanceof BackendError)) throw err;
    }
  }
  throw new Error("no answer in three passes");
}

/** The live servers, after a sweep past the grace that knows `live` running and `ended` ended. */
export async function afterSweep(s: HetznerScene, live: string[], ended: string[]) {
  const records = new Map<string, { ended: boolean }>([
    ...live.map((id) => [id, { ended: false }] as const),
    ...ended.map((id) => [id, { ended: true }] as const),
  ]);
  const t = s.clock.t;
  s.clock.t = t + ORPHAN_GRACE_MS + 60_000;
  await s.sweep(records);
  s.clock.t = t;
  return (await s.state()).servers;
}

/** The server boots `id`'s runner: the bootstrap in its user_data opens `id`'s launch, once. */
export async function bootsFor(s: HetznerScene, userData: string, id: string) {
  const boot = bootOf(userData)!;
  expect(boot.url).toBe(`https://dispatch.example.org/v1/assignments/${id}/bootstrap`);
  const launch = await s.stores.bootstraps.take<{ script: string }>(id, boot.token);
  expect(readLaunch(launch!.script).files[".runner"]).toContain(`identity-of-${id}`);
}

/** The servers whose user_data holds a bootstrap for `id` that is still there to take: never more than one. */
export async function bootableFor(s: HetznerScene, id: string) {
  const found = [];
  for (const v of (await s.state()).servers) {
    const token = bootOf(v.userData)?.token;
    const entry = token ? await s.stores.kv.get(await s.stores.bootstraps.keyOf(token)) : null;
    if (entry?.operation === "PUT" && entry.json<{ id: string; spent?: true }>().id === id && !entry.json<{ spent?: true }>().spent) found.push(v.id);
  }
  return found;
}

/** Bootstraps issued for `id` that could still be taken (not spent, revoked or expired): only the noted server's may be. */
export async function liveBootstraps(s: HetznerScene, id: string) {
  let n = 0;
  for await (const key of await s.stores.kv.keys("boot.>")) {
    const e = await s.stores.kv.get(key);
    if (e?.operation === "PUT" && e.length && e.json<{ id: string; spent?: true }>().id === id && !e.json<{ spent?: true }>().spent) n++;
  }
  return n;
}

/** How many calls a clean run of `fn` makes on a fresh scene set up by `setup`. */
export async function callsOf(scenes: HetznerScene[], setup: (s: HetznerScene) => Promise<void>, fn: (s: HetznerScene) => Promise<unknown>) {
  const { s, run } = await killable(scenes);
  await setup(s);
  return run(Infinity, "before", () => fn(s));
}

export const MODES: Mode[] = ["before", "after"];
