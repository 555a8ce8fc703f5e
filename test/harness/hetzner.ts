// The hetzner driver on the shared fake Hetzner API (a project of its own per scene), its notes
// and bootstraps in a provisioned records bucket of its own, on a clock the test moves.
import type { KV } from "@nats-io/kv";
import { afterAll, inject } from "vitest";
import { createRunnerBackend } from "../../src/app/select-backend.ts";
import type { Config } from "../../src/app/config.ts";
import type { RunnerBackend } from "../../src/domain/backend.ts";
import type { DriverStores } from "../../src/backends/driver-module.ts";
import { closeNats, openNats } from "../../src/nats/connection.ts";
import { recordsBucket } from "../../src/nats/names.ts";
import { createBootstraps } from "../../src/state/bootstraps.ts";
import { bindBucket, readAllUnder, readManyJson, type ReadMany } from "../../src/state/kv.ts";
import { createDriverFigures } from "../../src/state/driver-figures.ts";
import { FAKE_HCLOUD_TOKEN } from "../../scripts/fake-hetzner.mjs";
import { assignment, giteaTestEnv, provisionEnv, uniqueName } from "./env.ts";
import { launched } from "./launch.ts";
import type { PoolPlacement, RunnerRequest } from "../../src/domain/backend.ts";
import { placementOf } from "../../src/backends/refused-field.ts";

export const TEMPLATE = { image: "ubuntu-24.04", server_type: "cx22", location: "fsn1" };

export interface FakeServer {
  id: number;
  name: string;
  userData: string;
  labels: Record<string, string>;
  server_type: string;
  location: string;
  createdAt: number;
}

export interface HetznerScene {
  config: Config;
  driver: RunnerBackend;
  stores: DriverStores;
  clock: { t: number; real: boolean };
  base: string;
  ctl(what: string, body?: unknown): Promise<Record<string, unknown>>;
  state(): Promise<{ servers: FakeServer[]; deleted: FakeServer[]; requests: { method: string; path: string; query: string; body: string }[] }>;
  /** Runs the backend's orphan sweep as the tick does; `records` answers what the dispatcher's records would. */
  sweep(records?: Map<string, { ended: boolean }>, lifetimes?: Map<string, number>): Promise<{ deleted: number; events: Record<string, unknown>[] }>;
  close(): Promise<void>;
}

/** What a test puts between the driver and the world: its outbound fetch, and its records bucket. */
export interface SceneWrap {
  fetch?: typeof fetch;
  kv?: (kv: KV) => KV;
  /** Another scene's project or account (its `base`): two deployments in one. */
  base?: string;
  /** Around the records bucket's batch reader (readManyJson), which the dispatcher gives drivers. */
  readMany?: (real: ReadMany) => ReadMany;
  /** The dispatcher's one batch read under a prefix (readAllUnder) for the parked list, as in production; without it, the notes list keys. */
  readUnder?: boolean;
}

/** Runs a cloud driver's orphan sweep as the cron tick does; `records` answers what the dispatcher's records would. */
export async function sweepOnce(
  driver: RunnerBackend,
  records = new Map<string, { ended: boolean }>(),
  lifetimes = new Map<string, number>(),
  budgetMs = 10_000,
  now: () => number = Date.now,
  pools?: readonly PoolPlacement[],
) {
  const events: Record<string, unknown>[] = [];
  const done = await driver.tick!({
    ...(pools ? { pools } : {}),
    deadline: now() + budgetMs,
    call: (fn) => fn(AbortSignal.timeout(3_000)),
    records: async (ids) => new Map(ids.flatMap((id) => (records.has(id) ? [[id, records.get(id)!] as const] : []))),
    lifetimes,
    event: (event, fields) => void events.push({ event, ...fields }),
    // An interruption the sweep found (ec2's Spot backstop), as the dispatcher would be told of it.
    interrupted: async (id, notice) => void events.push({ event: "interrupted", assignment: id, notice }),
    signal: AbortSignal.timeout(budgetMs),
  });
  return { deleted: done.deleted, events };
}

/** The records bucket with each call of `methods` run through `around` (a test that cuts the Worker at a call). */
export function aroundKv(real: KV, methods: ReadonlySet<string>, around: <T>(call: () => Promise<T>) => Promise<T>): KV {
  return new Proxy(real, {
    get(target, prop, receiver) {
      const v: unknown = Reflect.get(target, prop, receiver);
      if (typeof v !== "function") return v;
      const fn = v as (...a: unknown[]) => Promise<unknown>;
      return methods.has(String(prop)) ? (...a: unknown[]) => around(() => fn.apply(target, a)) : fn.bind(target);
    },
  });
}

export async function hetznerScene(extra: Record<string, unknown> = {}, wrap: SceneWrap = {}): Promise<HetznerScene> {
  const base = wrap.base ?? `${inject("hetznerUrl")}/${uniqueName("hz")}`;
  const ctl = async (what: string, body?: unknown) =>
    (await (await fetch(`${base}/_control/${what}`, body ? { method: "POST", body: JSON.stringify(body) } : {})).json()) as Record<string, unknown>;
  const config = await provisionEnv(
    giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:2", {
      POD_DRIVER: "hetzner",
      HCLOUD_API_URL: base,
      HCLOUD_TOKEN: FAKE_HCLOUD_TOKEN,
      VM_TEMPLATE: JSON.stringify(TEMPLATE),
      ...extra,
    }),
  );
  const handle = await openNats(config);
  const bound = await bindBucket(handle, recordsBucket(config));
  const kv = wrap.kv ? wrap.kv(bound) : bound;
  // `real`: the clock is the machine's (a test that waits for the budget to refill).
  const clock = { t: Date.now(), real: false };
  const stores: DriverStores = {
    kv,
    readMany: (wrap.readMany ?? ((r: ReadMany) => r))((keys) => readManyJson(handle, recordsBucket(config), keys)),
    bootstraps: createBootstraps(kv, new Uint8Array(32).fill(7), () => clock.t),
    figures: createDriverFigures(kv),
    ...(wrap.readUnder ? { readUnder: (prefix: string) => readAllUnder(handle, recordsBucket(config), prefix) } : {}),
  };
  const more = { now: () => (clock.real ? Date.now() : clock.t), withStores: <T>(fn: (s: DriverStores) => Promise<T>) => fn(stores) };
  const b = config.backends[0]!;
  const driver = createRunnerBackend(config, b, wrap.fetch, more);
  return {
    config,
    driver,
    stores,
    clock,
    base,
    ctl,
    state: () => ctl("state") as ReturnType<HetznerScene["state"]>,
    sweep: (records, lifetimes) => sweepOnce(driver, records, lifetimes, 10_000, more.now, config.pools.map(placementOf)),
    close: () => closeNats(handle.nc),
  };
}

/**
 * A test file's scenes, closed after its tests (registers afterAll): `scene` makes one and keeps it;
 * `scenes` is for helpers that make their own (hetzner-kill.ts).
 */
export function keptScenes() {
  const scenes: HetznerScene[] = [];
  afterAll(async () => {
    for (const s of scenes.splice(0)) await s.close();
  });
  const scene = async (...a: Parameters<typeof hetznerScene>) => {
    const s = await hetznerScene(...a);
    scenes.push(s);
    return s;
  };
  return { scenes, scene };
}

/** A runner request as the dispatcher hands it to the hetzner driver: a Gitea identity of its own, its launch, its bootstrap URL. */
export function vmRequest(id: string, pool?: RunnerRequest["pool"]): RunnerRequest {
  const url = `https://dispatch.example.org/v1/assignments/${id}`;
  const runner = {
    WARNING: "x",
    id: 7,
    uuid: `uuid-of-${id}`,
    name: `gdr-${id}`,
    token: `identity-of-${id}`,
    address: "https://gitea.example.org",
    labels: ["l"],
    ephemeral: true,
  };
  return launched({
    assignment: assignment(id),
    claimToken: `claim-${id}`,
    claimUrl: `${url}/claim`,
    completeUrl: `${url}/complete`,
    bootstrapUrl: `${url}/bootstrap`,
    runner,
    ...(pool ? { pool } : {}),
  });
}

/** What a promise rejected with, or undefined when it resolved: a test asserts on the error itself. */
export const failure = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );
