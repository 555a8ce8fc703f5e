// What a driver is to the rest of the dispatcher: a module that reads its settings from the
// environment, checks what it would send at load, and builds the RunnerBackend of a backend.
// Drivers are listed in one place (drivers.ts); a new one is a folder here and a line there.
import type { KV } from "@nats-io/kv";
import type { PoolPlacement, RunnerBackend } from "../domain/backend.ts";
import type { Backend } from "../nats/names.ts";
import type { BootstrapStore } from "../state/bootstraps.ts";
import type { DriverFigureStore, Offer } from "../state/driver-figures.ts";
import type { ReadUnder } from "../state/kv.ts";

/** One enabled backend, with its driver. */
export interface BackendConfig {
  backend: Backend;
  capacity: number;
  batchSize: number;
  driver: string;
  /** The http driver's URL and token (a named backend's `url` and <NAME>_BACKEND_TOKEN). */
  url?: string | undefined;
  token?: string | undefined;
  /** A named backend's own template, in place of the driver's shared one (POD_TEMPLATE, VM_TEMPLATE). */
  template?: Record<string, unknown> | undefined;
  /** Its index in BACKENDS, for a named backend: problems name that entry's fields. */
  named?: number | undefined;
  /** Its driver replaces a runner reported interrupted before its claim (driver-module.ts replacesOnInterrupt). */
  interruptible?: true;
}

/** A backend as the environment describes it, before its driver has read it. */
export interface BackendEnv {
  backend: Backend;
  capacity: number;
  template?: Record<string, unknown> | undefined;
  /** Its index in BACKENDS, for a named backend: problems name that entry's fields. */
  named?: number | undefined;
  batchSize: number | undefined;
  driver: string;
  url: string | undefined;
  token: string | undefined;
}

/** Pool fields that only some drivers read. */
export const POOL_DRIVER_FIELDS = ["candidates", "reuse", "market", "spotFallback"] as const;
export type PoolDriverField = (typeof POOL_DRIVER_FIELDS)[number];

/** What a pool asks of its backend's driver, for the checks at load. */
export interface PoolView {
  name: string;
  labels: string[];
  template?: Record<string, unknown> | undefined;
  candidates?: Record<string, string>[] | undefined;
  market?: "spot" | "on-demand" | undefined;
  spotFallback?: "on-demand" | undefined;
  /** `RUNNER_POOLS[i]["field"]`: how a problem names a field of this pool. */
  at(field: string): string;
}

/** The stores a driver may keep its own notes in (the records bucket), for those that need them. */
export interface DriverStores {
  kv: KV;
  /** The latest values of many keys in one request; without it, keys are read a few at a time. */
  readMany?: ((keys: readonly string[]) => Promise<Map<string, { value: unknown; revision: number }>>) | undefined;
  /** Every live key under a prefix and its value, in one request (no consumer); without it, the keys are listed. */
  readUnder?: ReadUnder | undefined;
  bootstraps: BootstrapStore;
  figures: DriverFigureStore;
}

/** What a driver is built with, besides its backend and settings. */
export interface DriverDeps {
  fetch?: typeof fetch | undefined;
  /** RUNNER_NAME_PREFIX: workload names derive from it. */
  prefix: string;
  now: () => number;
  /** Runs `fn` with the invocation's stores (its NATS connection): only drivers that keep state between passes call it. */
  withStores?: (<T>(fn: (stores: DriverStores) => Promise<T>) => Promise<T>) | undefined;
  /** This deployment (ASSIGNMENT_STREAM and PUBLIC_URL), for labels that keep two dispatchers apart. */
  instance: string;
}

/** The variables of the environment every driver may read, already parsed where they are JSON. */
export type DriverEnv = Readonly<Record<string, unknown>>;

export interface DriverModule<S = unknown> {
  /** Runners start from a registered forge identity (GITEA_URL or FORGE=forgejo). */
  needsForge: boolean;
  /** Its accept ends the old machine and makes a new one when the claim token's incarnation changes: a runner's interruption report is taken. */
  replacesOnInterrupt?: true;
  /**
   * Settings shared by the driver's backends (a connection, secrets), read once when an enabled
   * backend uses it; `key` says which drivers share one reading (kubernetes and kubevirt).
   */
  settingsKey: string;
  /** The variable holding the template of its backends that have none of their own. */
  templateVariable?: "POD_TEMPLATE" | "VM_TEMPLATE";
  /** The driver's own pool fields its pools may set (`candidates`, `reuse`, `market`, `spotFallback`). */
  poolFields?: readonly PoolDriverField[];
  load(env: DriverEnv, using: readonly BackendConfig[], problems: string[]): S | undefined;
  /** Problems of what a backend would send with its template, found before the first job. */
  checkBackend?(settings: S, b: BackendConfig, variable: string, problems: string[]): void;
  /** Problems of a pool of this driver's (its template over the backend's), found before the first job. */
  checkPool?(settings: S, b: BackendConfig, pool: PoolView, problems: string[]): void;
  /** It counts figures of its backends (state/driver-figures.ts) for /metrics and the status: a cloud driver. */
  figures?: boolean;
  /**
   * What of the backend's placements (its template, its pools' over it) the cloud's offer, as the
   * tick last read it, says cannot be created: shown in /healthz before a job asks. None when the
   * offer was read elsewhere (another API URL) or not yet.
   */
  offerProblems?(settings: S, b: BackendConfig, pools: readonly PoolPlacement[], offer: Offer | undefined): { variable: string; message: string }[];
  create(b: BackendConfig, settings: S, deps: DriverDeps): RunnerBackend;
}

export type { TickAsk } from "../domain/backend.ts";
