// What a dispatcher is, apart from how createDispatcher (app/dispatcher.ts) builds one: the modules
// the dispatcher calls (the sweep, the webhook, the operations) take it by this interface, so that
// none of them imports the module that imports them.
import type { Assignment } from "../model/assignment.ts";
import type { PreparedRequest, RunnerBackend } from "./backend.ts";
import type { Config } from "../app/config.ts";
import type { BatchSummary, EventSink } from "../model/events.ts";
import type { Backend } from "../nats/names.ts";
import type { NatsHandle } from "../nats/connection.ts";
import type { Admission, Placement } from "../state/admission.ts";
import type { AssignmentRecord, RecordStore } from "../state/records.ts";
import type { WaitSet } from "../state/wait-set.ts";
import type { QuotaLedger } from "../state/quota-ledger.ts";
import type { TeardownList } from "../state/teardowns.ts";
import type { WarmSlots } from "../state/warm-slots.ts";
import type { StartupTimes } from "../state/startup-times.ts";
import type { HandleIndex } from "../state/handles.ts";
import type { ForgeHealthStore } from "../state/forge-health.ts";
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
  warm: WarmSlots;
  startups: StartupTimes;
  waiting: WaitSet;
  quotas: QuotaLedger;
  /** Forgejo job handles and the assignment each is bound to. */
  handles: HandleIndex;
  /** How the forge's poller fares (FORGE=forgejo). */
  forgeHealth: ForgeHealthStore;
}

export interface Dispatcher {
  config: Config;
  sink: EventSink;
  now: () => number;
  runnersFor: (backend: Backend) => RunnerBackend;
  /** Runs `fn` on this invocation's connection (or a fresh one, drained afterwards). */
  withState: <T>(fn: (state: State, handle: NatsHandle) => Promise<T>) => Promise<T>;
  /** Runs `fn` on a connection of its own, opened now (to any server of NATS_URL) and drained after. */
  withFreshState: <T>(fn: (state: State) => Promise<T>) => Promise<T>;
  /** Drains the shared connection, if one was opened. Call once the invocation's work is done. */
  close(): Promise<void>;
  runnerRequest: (assignment: Assignment, record: AssignmentRecord, reserved: boolean, placement?: Placement) => Promise<PreparedRequest>;
  /** The forge runners are registered with (FORGE), when one is configured. */
  forge: Forge<Dispatcher> | undefined;
  callBackend: <T>(fn: (signal: AbortSignal) => Promise<T>) => Promise<T>;
  /** Reconciles the given backends (default: every enabled one) within `budgetMs`. */
  reconcile(trigger: string, budgetMs: number, opts?: ReconcileOptions): Promise<BatchSummary[]>;
  /** A cron tick: the Gitea sweep (missed deliveries, stale runners), then reconciliation. */
  tick(trigger: string): Promise<BatchSummary[]>;
}
