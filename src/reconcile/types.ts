// What the reconciliation's executor works with: its dependencies, passed in by the dispatcher,
// and one delivery on its way through the decision table.
import type { Assignment } from "../model/assignment.ts";
import type { PreparedRequest, RunnerBackend } from "../domain/backend.ts";
import type { EventSink } from "../model/events.ts";
import type { Backend } from "../nats/names.ts";
import type { DeliveredMessage } from "../nats/pull.ts";
import type { Admission, Placement } from "../state/admission.ts";
import type { Versioned } from "../state/kv.ts";
import type { AssignmentRecord, RecordStore } from "../state/records.ts";
import type { Facts, Policy } from "./decide.ts";
import type { WaitSet } from "../state/wait-set.ts";
import type { Forge } from "../domain/forge.ts";
import type { RememberedWaitSet } from "../state/waiting-seen.ts";
import type { QuotaLedger } from "../state/quota-ledger.ts";
import type { ShareRules } from "../quotas/fair-share.ts";

export interface WaitingDeps {
  /** With whether this isolate has a "does anybody wait" under way (waiting-seen.ts), where it knows. */
  set: WaitSet & Partial<Pick<RememberedWaitSet, "asking">>;
  /** The assignment stream the wait set serves (ASSIGNMENT_STREAM): passes of one deployment share its turns. */
  stream: string;
  rules: ShareRules;
  /** QUOTAS limits, when any is set. */
  ledger?: QuotaLedger;
  /**
   * The pass's backend's capacity, where no pool runs on another backend: a pass that finds every
   * slot held gives no turn, without reading the heads (a job that spills could run elsewhere).
   */
  capacity?: number;
  /**
   * How old a slot whose record still says no runner was asked for may be before it is presumed
   * stalled (ACK_WAIT_MS): its pass died or failed before asking (stalled.ts). Without it, never.
   */
  stallAfterMs?: number;
  /** The message a waiting job's delivery left held, by its ack subject: its turn acks or terms it from here. */
  held(ackSubject: string, data: Uint8Array): DeliveredMessage;
}

export type { PreparedRequest };

/** What a cloud backend's launch watch needs (launch-watch.ts, process-deps.ts): none for backends whose runners fetch no launch. */
export interface LaunchWatch {
  /** The VM's name for people: "server" (hetzner), "instance" (ec2). */
  thing: string;
  /** What a VM that never runs its job costs until its boot timeout, in a few words. */
  cost: string;
}

export interface ProcessDeps {
  backend: Backend;
  trustDomain: string;
  policy: Policy;
  records: RecordStore;
  admission: Admission;
  /** The driver of each enabled backend: a job spilled to another pool runs on that pool's. */
  runnersFor(backend: Backend): RunnerBackend;
  /** The configured pools by name, for the places an assignment's `pools` name. */
  pools: ReadonlyMap<string, { backend: Backend; maxIdleMs: number; bootTimeoutMs: number; waitForReuseMs?: number }>;
  /** WARM_GRACE_MS: how long a new job waits for an idle warm runner of its pool before its own is asked for. */
  warmGraceMs: number;
  /** Pools that keep warm runners (minIdle, or a schedule window): a grace is worth a read only for them. */
  warmPools: ReadonlySet<string>;
  /** Whether Gitea still lists the job as queued; undefined without the Gitea API (a Gitea that cannot say answers true). */
  jobQueued?: (repository: string, id: number) => Promise<boolean>;
  /** Why a job past its claim timeout keeps its runner (forge.ts Forge.claimHeld); absent where the forge cannot say. */
  claimHeld?: Forge<never>["claimHeld"];
  /** Counts a runner given up on (never booted) in its pool's durable figures. */
  countGiveUp(pool: string): Promise<void>;
  /** A cloud backend's VMs fetch a launch at boot: a delivery says once when one is late (launch-watch.ts). */
  launchWatch?: LaunchWatch;
  /** Counts a pool's VM that did not fetch its launch in time (startup-times.ts). */
  countLaunchMissed?(pool: string): Promise<void>;
  /** Keeps a backend's refusal of our credentials or a template's field for /healthz (driver-figures.ts). */
  noteRefusal?(backend: string, refusal: { variable: string; kind: "credentials" | "configuration"; message: string }): Promise<void>;
  /**
   * Promises one of `pool`'s idle warm runners to a new job whose grace ends at `until`: true while
   * the isolate has promised fewer than are idle (state/warm-look.ts), so that only as many jobs wait for one.
   */
  takeIdleWarm(pool: string, until: number): Promise<boolean>;
  /** Fair share (FAIR_SHARE=on): jobs that find no slot, or others waiting, wait their turn in the wait set. */
  waiting?: WaitingDeps;
  /** True when provisioning needs a registered runner identity (Gitea integration on). */
  needsIdentity: boolean;
  /** Records are replicated (JETSTREAM_REPLICAS > 1): a read may come from a replica that lags. */
  replicated: boolean;
  /** Runs `fn` on a new connection: the pass's own may have died with its server. */
  withFreshRecords<T>(fn: (records: RecordStore) => Promise<T>): Promise<T>;
  /** What the backend receives (claim token, URLs, runner identity); "busy" while another invocation registers it. */
  runnerRequest(assignment: Assignment, record: AssignmentRecord, reserved: boolean, placement: Placement): Promise<PreparedRequest>;
  /**
   * Tears down a workload this pass asked for after its assignment ended meanwhile (the ender's
   * teardown may have reached the backend before the request did); one that fails is listed for
   * the tick. The forge's runner is the ender's to delete.
   */
  endWorkload(id: string, backend: Backend): Promise<boolean>;
  /** Runs a backend call within the invocation's connection limit and timeout. */
  callBackend<T>(fn: (signal: AbortSignal) => Promise<T>): Promise<T>;
  sink: EventSink;
  now: () => number;
}

/** One delivery on its way through the table. */
export interface Prepared {
  msg: DeliveredMessage;
  facts: Facts;
  assignment?: Assignment;
  known?: Versioned<AssignmentRecord>;
  reserved: boolean;
  /** Where admission put it (its pool and that pool's backend). */
  placement?: Placement;
  /**
   * This pass registered a runner. Its reservation stays until its lease ends: the record write
   * may have failed, and even once written, a replica that lags (direct gets are answered by any
   * replica) may show the record without it for a moment; a pass that read that and held no
   * reservation would register a second runner.
   */
  registered?: true;
  /** Its slot was given back (or may have been: the release was sent): a waiting job may take it. */
  freedSlot?: true;
  /** A step of its own failed while the batch was prepared: it is nak'd alone (see run.ts). */
  failed?: Error;
  /** Epoch ms until which the pass holds this delivery for its claim (see hold.ts). */
  heldUntil?: number;
  /** Its backend's word, after the ask, on how its machine was made (RunnerBackend.made): written with the record. */
  made?: "rebuilt";
}
