// What a cloud driver counts of a backend, kept durably so that every isolate's /metrics agrees:
// workloads its sweep deleted, the times its project was full (and until when it is taken to be),
// and what the API last said of its rate budget. One KV entry per backend, changed by
// compare-and-set; read for every backend in one request.
import type { KV } from "@nats-io/kv";
import type { NatsHandle } from "../nats/connection.ts";
import { DRIVER_NOTE_PREFIX } from "../nats/names.ts";
import { casUpdate, readJson, readManyJson } from "./kv.ts";

export interface DriverFigures {
  /** Workloads the driver's sweep deleted (orphans, ended, past their lifetime). */
  swept: number;
  /** Refusals for the project's limit (Hetzner's resource_limit_exceeded). */
  fullTotal: number;
  /** Epoch ms until which the backend is taken to be full: no create is tried before. */
  fullUntil?: number;
  /** The API's rate budget as last seen: requests left of `limit`, at `at` (epoch ms). */
  rate?: { limit: number; remaining: number; at: number };
  /** The backend's latest refusals of our credentials or a template's field, by the variable to fix (BackendRefused). */
  refused?: Record<string, Refusal>;
  /** What the cloud offers (server types, locations, images), as the driver's tick last read it. */
  offer?: Offer;
  /** Paid time of the servers deleted, by pool ("-": none), in seconds: see Paid. */
  paid?: Record<string, Paid>;
}

/**
 * What a cloud that bills by the started hour (Hetzner) was paid for the servers deleted: `used`,
 * from each one's creation to its delete (its jobs, and its waits as a warm or parked server);
 * `givenUp`, the rest of the hour it was deleted in, paid and unused.
 */
export interface Paid {
  servers: number;
  used: number;
  givenUp: number;
}

/** `f` with `deleted` servers' paid time added to each one's pool (own keys only: a pool may be named "constructor"). */
export function withPaid(f: DriverFigures, deleted: readonly ({ pool: string } & Omit<Paid, "servers">)[]): DriverFigures {
  if (!deleted.length) return f;
  const paid = { ...f.paid };
  for (const d of deleted) {
    const was = Object.hasOwn(paid, d.pool) ? paid[d.pool]! : { servers: 0, used: 0, givenUp: 0 };
    paid[d.pool] = { servers: was.servers + 1, used: was.used + d.used, givenUp: was.givenUp + d.givenUp };
  }
  return { ...f, paid };
}

export interface Offer {
  /** Epoch ms it was read. */
  at: number;
  /** Where it was read (the API's URL, a region): an offer of another is not this backend's. */
  of: string;
  /** The driver's own reading (hetzner/offer.ts). */
  data: unknown;
}

/** The offer is read again each hour, and every five minutes while a placement is not in it (a snapshot made since, a type now sold). */
export const OFFER_MAX_AGE_MS = 3_600_000;
export const OFFER_RECHECK_MS = 5 * 60_000;

/** Whether the tick reads the offer again: none kept, one of another API, or one old enough. */
export function offerDue(offer: Offer | undefined, of: string, now: number, mismatched: boolean): boolean {
  if (!offer || offer.of !== of) return true;
  const age = now - offer.at;
  return !(age >= 0) || age >= OFFER_MAX_AGE_MS || (mismatched && age >= OFFER_RECHECK_MS);
}

export interface Refusal {
  kind: "credentials" | "configuration";
  /** What the cloud said, with the field's value: never a secret. */
  message: string;
  /** Epoch ms of the latest: a refusal not seen again for REFUSAL_FRESH_MS was fixed. */
  at: number;
}

/**
 * A refusal is shown while it keeps coming: a refused job asks again each minute (decide.ts's
 * DEFAULT_DELAYS.refused), so one not seen for three is fixed, or has no job left to refuse.
 */
export const REFUSAL_FRESH_MS = 3 * 60_000;

/** The refusals still coming at `now`, by variable. */
export function freshRefusals(f: DriverFigures | undefined, now: number): [string, Refusal][] {
  return Object.entries(f?.refused ?? {}).filter(([, r]) => now - r.at <= REFUSAL_FRESH_MS);
}

/** `f` with `refusal` of `variable` kept, and refusals no longer coming dropped. */
export function withRefusal(f: DriverFigures, variable: string, refusal: Refusal): DriverFigures {
  const kept = Object.fromEntries(freshRefusals(f, refusal.at));
  return { ...f, refused: { ...kept, [variable]: refusal } };
}

export const figuresKey = (backend: string) => `${DRIVER_NOTE_PREFIX}-figures.${backend}`;

export interface DriverFigureStore {
  get(backend: string): Promise<DriverFigures | undefined>;
  change(backend: string, fn: (f: DriverFigures) => DriverFigures): Promise<void>;
  read(backends: readonly string[]): Promise<Map<string, DriverFigures>>;
}

export function createDriverFigures(kv: KV, read?: (keys: string[]) => Promise<Map<string, { value: DriverFigures }>>): DriverFigureStore {
  return {
    async get(backend) {
      return (await readJson<DriverFigures>(kv, figuresKey(backend)))?.value;
    },
    async change(backend, fn) {
      await casUpdate<DriverFigures, void>(kv, figuresKey(backend), (current) => ({
        value: fn(current?.value ?? { swept: 0, fullTotal: 0 }),
        result: undefined,
      }));
    },
    async read(backends) {
      if (!read) throw new Error("no batch read");
      const found = await read(backends.map(figuresKey));
      return new Map(backends.flatMap((b) => (found.has(figuresKey(b)) ? [[b, found.get(figuresKey(b))!.value] as const] : [])));
    },
  };
}

/** Every backend's figures in one request. */
export function figureReader(handle: NatsHandle, bucket: string) {
  return (keys: string[]) => readManyJson<DriverFigures>(handle, bucket, keys);
}
