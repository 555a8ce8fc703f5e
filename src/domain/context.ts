// What a dispatcher is, apart from how createDispatcher (app/dispatcher.ts) builds one: the modules
// the dispatcher calls (the sweep, the webhook, the operations) take it by this interface, so that
// none of them imports the module that imports them.
import type { Assignment } from "../model/assignment.ts";
import type { PreparedRequest, RunnerBackend } from "./backend.ts";
import type { BatchSummary, EventSink } from "../model/events.ts";
import type { Backend } from "../nats/names.ts";
import type { NatsHandle } from "../nats/connection.ts";
import type { Admission, Placement } from "../state/admission.ts";
import type { AssignmentRecord, RecordStore } from "../state/records.ts";
import type { RememberedWaitSet } from "../state/waiting-seen.ts";
import type { WarmLook } from "../state/warm-look.ts";
import type { QuotaLedger } from "../state/quota-ledger.ts";
import type { TeardownList } from "../state/teardowns.ts";
import type { RerunList } from "../state/reruns.ts";
import type { WarmSlots } from "../state/warm-slots.ts";
import type { StartupTimes } from "../state/startup-times.ts";
import type { HandleIndex } from "../state/handles.ts";
import type { ForgeHealthStore } from "../state/forge-health.ts";
import type { BootstrapStore } from "../state/bootstraps.ts";
import type { DriverFigureStore } from "../state/driver-figures.ts";
import type { KV } from "@nats-io/kv";
import type { ReadMany, ReadUnder } from "../state/kv.ts";
import type { Forge } from "./forge.ts";

export interface ReconcileOptions {
  only?: Backend[];
  /** The first pull waits this long for a message to come due (after a claim: its nak delay). */
  firstPullWaitMs?: number;
  /** Keep ready runners' messages within the pass and ack each as its claim lands (cron passes). */
  holdClaims?: boolean;
  /**
   * A pass right after a request: small pulls until one brings a new assignment (its own, or one
   * due before it), so that a burst of requests does not become a burst of full passes.
   */
  eager?: boolean;
}

export interface State {
  records: RecordStore;
  admission: Admission;
  teardowns: TeardownList;
  /** Jobs lost with an interrupted runner, until their rerun is asked for (domain/reruns.ts). */
  reruns: RerunList;
  warm: WarmSlots;
  startups: StartupTimes;
  waiting: RememberedWaitSet;
  /** What this isolate last read of its pools' idle warm runners, and promised of them (state/warm-look.ts). */
  warmLook: WarmLook;
  quotas: QuotaLedger;
  /** Forgejo job handles and the assignment each is bound to. */
  handles: HandleIndex;
  /** How the forge's poller fares (FORGE=forgejo). */
  forgeHealth: ForgeHealthStore;
  /** One-time bootstraps of VMs (the hetzner driver), sealed under a key derived from CLAIM_SIGNING_KEY. */
  bootstraps: BootstrapStore;
  /** The records bucket, for drivers' own notes (backends/driver-module.ts DriverStores). */
  driverKv: KV;
  /** The latest values of many keys of the records bucket in one request (a driver's notes, read in batches). */
  driverRead: ReadMany;
  /** Every live key of the records bucket under a prefix, in one request (a driver's list, with no consumer). */
  driverReadUnder: ReadUnder;
  /** What cloud drivers count per backend (sweeps, a full project, the rate budget), for /metrics. */
  driverFigures: DriverFigureStore;
}

/** The time, and where events go: what nearly every step needs. */
export interface Basics {
  sink: EventSink;
  now: () => number;
}

/** The stores in NATS. */
export interface StoreAccess {
  /** Runs `fn` on this invocation's connection (or a fresh one, drained afterwards). */
  withState: <T>(fn: (state: State, handle: NatsHandle) => Promise<T>) => Promise<T>;
  /** Runs `fn` on a connection of its own, opened now (to any server of NATS_URL) and drained after. */
  withFreshState: <T>(fn: (state: State) => Promise<T>) => Promise<T>;
}

/** The runner backends, each call bounded by the invocation's limits. */
export interface BackendAccess {
  runnersFor: (backend: Backend) => RunnerBackend;
  callBackend: <T>(fn: (signal: AbortSignal) => Promise<T>) => Promise<T>;
}

/** The forge runners are registered with (FORGE), when one is configured. */
export interface ForgeAccess {
  forge: Forge<Context> | undefined;
}

/**
 * The validated configuration. Its fields are declared where it is read from the environment
 * (app/config.ts augments this interface), so that the domain names it without importing the
 * wiring; a step says which fields it reads with Settings<K>.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- filled in by app/config.ts
export interface Config {}

/** The settings a step reads: `K`, the fields of the configuration it needs. */
export interface Settings<K extends keyof Config = keyof Config> {
  config: Pick<Config, K>;
}

/**
 * What a step of the dispatcher's work may be given: each module names the parts it uses
 * (`Basics & Settings<"pools">`, …), so that what it can reach is what it says.
 */
export type Context = Basics & StoreAccess & BackendAccess & ForgeAccess & Settings;

/** The passes an invocation runs. */
export interface Passes {
  /** Reconciles the given backends (default: every enabled one) within `budgetMs`. */
  reconcile(trigger: string, budgetMs: number, opts?: ReconcileOptions): Promise<BatchSummary[]>;
  /** A cron tick: the forge's work (Gitea's sweep, Forgejo's cleanup), then reconciliation. */
  tick(trigger: string): Promise<BatchSummary[]>;
}

/** The end of an invocation's work. */
export interface Lifetime {
  /** Drains the shared connection, if one was opened. Call once the invocation's work is done. */
  close(): Promise<void>;
}

/** What the faces (http/, gateway/) are handed by the wiring: the context, its passes and its end. */
export type Invocation = Context & Passes & Lifetime;

/** The dispatcher the wiring builds (app/dispatcher.ts): what the faces are handed, and how the passes ask for a runner. */
export interface Dispatcher extends Basics, StoreAccess, BackendAccess, ForgeAccess, Settings, Passes, Lifetime {
  runnerRequest: (assignment: Assignment, record: AssignmentRecord, reserved: boolean, placement?: Placement) => Promise<PreparedRequest>;
}
