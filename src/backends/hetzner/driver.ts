// The hetzner driver: one server per assignment (its accept in accept.ts), its teardown (parked for
// the pool's next job, or deleted once: its note claimed first), and the sweep on the cron tick. Every
// call of an invocation goes through an API client of its own that spends the project's one budget.
import type { KV } from "@nats-io/kv";
import { driverBudgetKey } from "../../nats/names.ts";
import { casUpdate } from "../../state/kv.ts";
import { sharedGate, type BudgetStore } from "./shared-budget.ts";
import { BackendError, type RunnerBackend, type RunnerRequest, type RunnerStatus } from "../../domain/backend.ts";
import type { DriverDeps, DriverStores, TickAsk } from "../driver-module.ts";
import { objectNames } from "../kubernetes/names.ts";
import { createHetznerApi, RateBudgetExhausted, type HetznerApi, type HetznerServer } from "./client.ts";
import { createNotes, DELETE_CLAIM_MS, type Notes } from "./notes.ts";
import { acceptWith } from "./accept.ts";
import { projectedRemaining, type CallKind, type RateState } from "./rate-budget.ts";
import { sweepServers } from "./sweep.ts";
import { refreshOffer } from "./offer.ts";
import { withPaid, type Offer } from "../../state/driver-figures.ts";
import { hourLeft, ownsServer, paidAtDelete, parkIfWorthIt } from "./reuse.ts";
import { isOurs, serverName } from "./server-body.ts";
import type { RunnerDownload } from "../user-data.ts";

export interface HetznerSettings {
  url: string;
  token: string;
  /** VM_TEMPLATE: the create body's defaults for backends without their own. */
  template: Record<string, unknown> | undefined;
  download: RunnerDownload | undefined;
}

export { BOOTSTRAP_TTL_MS, FULL_RECHECK_MS, ProjectFull, STATUS_READ_AFTER_MS } from "./accept.ts";
/** Rebuilt assignments kept for the pass's question (made) at most: each is asked right after its accept. */
const MADE_KEPT = 1_000;
/** How long a delete waits for the rate budget within its call, rather than failing to the retries. */
export const DELETE_WAIT_MS = 3_000;

export interface HetznerDriverOptions {
  backend: string;
  settings: HetznerSettings;
  template: Record<string, unknown> | undefined;
  /** Where the template was written: VM_TEMPLATE, or BACKENDS[i].template. */
  templateVariable: string;
  deps: DriverDeps;
}

export interface HetznerDriver extends RunnerBackend {
  /** The orphan sweep (sweep.ts), its count and the rate budget kept in the backend's figures. */
  tick(ask: TickAsk): Promise<{ listed: number; deleted: number }>;
}

/** The records-bucket record every invocation's calls take their requests from (shared-budget.ts). */
export function kvBudgetStore(kv: KV): BudgetStore {
  return {
    update: <R>(change: Parameters<BudgetStore["update"]>[0]) =>
      casUpdate<RateState, R>(kv, driverBudgetKey("hetzner"), (cur) => change(cur?.value) as { value: RateState | undefined; result: R }),
  };
}

export function createHetznerDriver(opts: HetznerDriverOptions): HetznerDriver {
  const { deps, backend } = opts;
  /** Assignments whose accept found (or made) their server rebuilt from a parked one, until the pass asks (made). */
  const rebuilt = new Set<string>();
  /**
   * Runs `fn` with the invocation's stores and an API client of its own, whose calls spend the
   * project's one budget, shared by every invocation through the records bucket.
   */
  const withStores = <T>(fn: (s: DriverStores & { notes: Notes; api: HetznerApi; calls: Calls }) => Promise<T>): Promise<T> => {
    if (!deps.withStores) throw new BackendError("the hetzner driver needs the dispatcher's stores");
    return deps.withStores(async (s) => {
      const gate = sharedGate(kvBudgetStore(s.kv), deps.now);
      const api = createHetznerApi({ url: opts.settings.url, token: opts.settings.token, now: deps.now, gate, ...(deps.fetch ? { fetch: deps.fetch } : {}) });
      return fn({ ...s, notes: createNotes(s.kv, s.readMany, s.readUnder), api, calls: invocation(api) });
    });
  };

  return {
    tick: (ask) =>
      withStores(async ({ notes, figures, api }) => {
        const swept = await sweepServers(api, notes, backend, deps.instance, deps.now, ask);
        const rate = api.gate.state();
        let kept: Offer | undefined;
        await figures.change(backend, (f) => {
          kept = f.offer;
          return {
            ...withPaid(f, swept.paid),
            swept: f.swept + swept.deleted,
            ...(rate ? { rate: { limit: rate.limit, remaining: Math.floor(projectedRemaining(rate, deps.now())), at: deps.now() } } : {}),
          };
        });
        // Not read this tick (the budget, the API): the kept offer stands, and the next tick asks again.
        const placing = { url: opts.settings.url, templateVariable: opts.templateVariable, template: opts.template, pools: ask.pools ?? [] };
        await refreshOffer({ api, figures, backend, now: deps.now, signal: ask.signal }, placing, kept).catch(() => undefined);
        return { listed: swept.listed, deleted: swept.deleted };
      }),
    accept: (request, signal) => withStores(({ notes, bootstraps, figures, calls }) => calls.acceptWith(notes, bootstraps, figures, request, signal)),
    parked: (pool) =>
      withStores(async ({ notes }) =>
        (await notes.parked(backend, pool)).map(({ value: p }) => ({ server: p.serverId, paidUntil: deps.now() + hourLeft(p.paidFrom, deps.now()) })),
      ),
    made: (id) => (rebuilt.delete(id) ? "rebuilt" : undefined),
    teardown: (id, signal) =>
      withStores(async ({ notes, bootstraps, figures, calls }) => {
        const { label } = await objectNames(deps.prefix, id);
        const read = await notes.getAt(backend, label);
        const note = read?.value;
        // A create asked and not answered: its bootstrap is revoked, and the server of its name, if any, goes.
        if (note?.creating !== undefined) await bootstraps.revoke(note.creating);
        const serverId = note?.serverId ?? (await calls.ownByName(id, signal))?.id;
        if (serverId === undefined) return note ? notes.remove(backend, label) : undefined;
        // Another teardown or the sweep claimed its delete, and is under way.
        if (note?.deleting !== undefined && deps.now() - note.deleting < DELETE_CLAIM_MS) return;
        // Parked by a teardown cut short, or rebuilt for another job since: not this one's to end.
        if (note?.reuse !== undefined || note?.serverId === undefined) {
          if (!(await ownsServer(notes, backend, label, serverId))) return note ? notes.remove(backend, label) : undefined;
        }
        if (note?.serverId !== undefined && (await parkIfWorthIt(notes, backend, { ...note, serverId }, deps.now()))) return notes.remove(backend, label);
        // Claimed before the delete: a sweep that judged it ended too leaves it to this teardown (never deleted twice).
        const claim = read && note ? { take: () => notes.claim(backend, label, read, deps.now()), undo: () => notes.put(backend, label, note) } : undefined;
        await calls.removeSoon(serverId, signal, claim);
        await notes.removeDeleted(backend, label, serverId, deps.now());
        // Counted once deleted: a teardown killed before this leaves a server deleted and not counted, never one counted twice.
        const paidFrom = note?.reuse?.paidFrom ?? note?.createdAt;
        if (paidFrom !== undefined) await figures.change(backend, (f) => withPaid(f, [paidAtDelete(note?.reuse?.pool ?? note?.pool, paidFrom, deps.now())]));
      }),
  };

  /** The driver's calls within one invocation, on its API client. */
  function invocation(api: HetznerApi): Calls {
    const calls: Calls = {
      ownByName,
      removeSoon,
      acceptWith: (...a) => {
        // An accept whose pass never asks (it died) leaves its id: a bound on what is kept.
        if (rebuilt.size >= MADE_KEPT) rebuilt.clear();
        const made = (id: string) => void rebuilt.add(id);
        return acceptWith(
          { api, deps, backend, template: opts.template, templateVariable: opts.templateVariable, download: opts.settings.download, calls, made },
          ...a,
        );
      },
    };
    return calls;

    /** The server named for assignment `id`, only when it carries this deployment's and backend's labels. */
    async function ownByName(id: string, signal: AbortSignal, kind: CallKind = "read"): Promise<HetznerServer | undefined> {
      const found = await api.byName(await serverName(deps.prefix, id, deps.instance, backend), signal, kind);
      return found && isOurs(found.labels, deps.instance, backend) ? found : undefined;
    }

    /**
     * A delete the budget holds back for a moment (parallel calls spent it, a 429) waits for it
     * within its call: a server left running is a bill. Its request is taken before `claim` runs,
     * so that a claim is never made for a delete the budget refuses; one that fails after its claim
     * undoes the claim.
     */
    async function removeSoon(serverId: number, signal: AbortSignal, claim?: Claim): Promise<void> {
      const until = deps.now() + DELETE_WAIT_MS;
      const waited = async <T>(fn: () => Promise<T>): Promise<T> => {
        for (let tries = 1; ; tries++) {
          try {
            return await fn();
          } catch (err) {
            const at = err instanceof RateBudgetExhausted ? Math.max(err.retryAt, deps.now() + 250) : Infinity;
            if (at > until || tries >= 5) throw err;
            await new Promise((r) => setTimeout(r, at - deps.now()));
          }
        }
      };
      await waited(() => api.gate.reserve("delete", 1));
      if (claim && !(await claim.take())) {
        await api.gate.release();
        throw new BackendError("the server's note changed meanwhile (a sweep deletes it, or a pass wrote it); trying again");
      }
      try {
        await waited(() => api.remove(serverId, signal));
      } catch (err) {
        // Refused or failed: the claim goes, so that the retry (this teardown's, or the sweep's) deletes it.
        if (claim) await claim.undo();
        throw err;
      }
    }
  }
}

/** The driver's calls of one invocation (createHetznerDriver's invocation). */
interface Calls {
  acceptWith(
    notes: Notes,
    bootstraps: DriverStores["bootstraps"],
    figures: DriverStores["figures"],
    request: RunnerRequest,
    signal: AbortSignal,
  ): Promise<RunnerStatus>;
  ownByName(id: string, signal: AbortSignal, kind?: CallKind): Promise<HetznerServer | undefined>;
  removeSoon(serverId: number, signal: AbortSignal, claim?: Claim): Promise<void>;
}

/** A note claimed before its server's delete (notes.ts claim), and put back when the delete was refused. */
interface Claim {
  take(): Promise<boolean>;
  undo(): Promise<void>;
}
