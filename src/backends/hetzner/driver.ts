// The hetzner driver's accept and teardown: one server per assignment, named after it, created
// from the templates and the first candidate with room; its id kept in a note so that neither a
// status poll nor a lookup is needed on the usual path (create, the claim, delete).
import type { KV } from "@nats-io/kv";
import { driverBudgetKey } from "../../nats/names.ts";
import { casUpdate } from "../../state/kv.ts";
import { sharedGate, type BudgetStore } from "./shared-budget.ts";
import { BackendError, type RunnerBackend, type RunnerRequest, type RunnerStatus } from "../../domain/backend.ts";
import type { DriverDeps, DriverStores, TickAsk } from "../driver-module.ts";
import { objectNames } from "../kubernetes/names.ts";
import { createHetznerApi, HetznerError, RateBudgetExhausted, type HetznerApi, type HetznerServer } from "./client.ts";
import { createNotes, DELETE_CLAIM_MS, type Notes, type ServerNote } from "./notes.ts";
import { projectedRemaining, type CallKind, type RateState } from "./rate-budget.ts";
import { sweepServers } from "./sweep.ts";
import { ownsServer, parkIfWorthIt, resumeRebuild, takeParked, type IssueBoot, type RebuildCtx } from "./reuse.ts";
import { base64url } from "../../model/crypto.ts";
import { bootMark, createBody, isOurs, LABELS, serverName, type Candidate } from "./server-body.ts";
import { bootUserData, launchScript, runnerProgram, type RunnerDownload } from "../user-data.ts";

export interface HetznerSettings {
  url: string;
  token: string;
  /** VM_TEMPLATE: the create body's defaults for backends without their own. */
  template: Record<string, unknown> | undefined;
  download: RunnerDownload | undefined;
}

/** A server is looked at once, this long after its create, unless its claim came first. */
export const STATUS_READ_AFTER_MS = 90_000;
/** How long a delete waits for the rate budget within its call, rather than failing to the retries. */
export const DELETE_WAIT_MS = 3_000;
/** How long a bootstrap token may wait for its server's first boot. */
export const BOOTSTRAP_TTL_MS = 30 * 60_000;
/** Statuses of a server that will not run its runner (any other is on its way up). */
const ENDED = new Set(["off", "stopping", "deleting"]);
/** Refusals that mean "no room for this candidate": the next one is tried in the same pass. */
const NO_ROOM = new Set(["resource_unavailable", "placement_error"]);

/** After the project's server limit refused a create, the next create is tried this much later (a delete may come first). */
export const FULL_RECHECK_MS = 30_000;

/** The project's server limit: a full backend, not a failure; no create is tried until FULL_RECHECK_MS has passed. */
export class ProjectFull extends BackendError {
  readonly full = true;
}

export interface HetznerDriverOptions {
  backend: string;
  settings: HetznerSettings;
  template: Record<string, unknown> | undefined;
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
  /**
   * Runs `fn` with the invocation's stores and an API client of its own, whose calls spend the
   * project's one budget, shared by every invocation through the records bucket.
   */
  const withStores = <T>(fn: (s: DriverStores & { notes: Notes; api: HetznerApi; calls: Calls }) => Promise<T>): Promise<T> => {
    if (!deps.withStores) throw new BackendError("the hetzner driver needs the dispatcher's stores");
    return deps.withStores(async (s) => {
      const gate = sharedGate(kvBudgetStore(s.kv), deps.now);
      const api = createHetznerApi({ url: opts.settings.url, token: opts.settings.token, now: deps.now, gate, ...(deps.fetch ? { fetch: deps.fetch } : {}) });
      return fn({ ...s, notes: createNotes(s.kv, s.readMany), api, calls: invocation(api) });
    });
  };

  return {
    tick: (ask) =>
      withStores(async ({ notes, figures, api }) => {
        const swept = await sweepServers(api, notes, backend, deps.instance, deps.now, ask);
        const rate = api.gate.state();
        await figures.change(backend, (f) => ({
          ...f,
          swept: f.swept + swept.deleted,
          ...(rate ? { rate: { limit: rate.limit, remaining: Math.floor(projectedRemaining(rate, deps.now())), at: deps.now() } } : {}),
        }));
        return swept;
      }),
    accept: (request, signal) => withStores(({ notes, bootstraps, figures, calls }) => calls.acceptWith(notes, bootstraps, figures, request, signal)),
    teardown: (id, signal) =>
      withStores(async ({ notes, bootstraps, calls }) => {
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
      }),
  };

  /** The driver's calls within one invocation, on its API client. */
  function invocation(api: HetznerApi): Calls {
    return { acceptWith, ownByName, removeSoon };

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

    async function acceptWith(
      notes: Notes,
      bootstraps: DriverStores["bootstraps"],
      figures: DriverStores["figures"],
      request: RunnerRequest,
      signal: AbortSignal,
    ): Promise<RunnerStatus> {
      const id = request.assignment.id;
      const names = await objectNames(deps.prefix, id);
      const note = await notes.get(backend, names.label);
      const { launch, bootstrapUrl } = request;
      if (!launch || !bootstrapUrl) throw new BackendError("no runner identity: the hetzner driver needs a forge (GITEA_URL)");
      // Issued before the create or the rebuild: one whose answer is lost still has its token, and an unused one expires.
      const boot: IssueBoot = async (noted) => {
        // Derived from a nonce of its own: its key is known, and noted, before the token exists.
        const attempt = `hetzner:${base64url(crypto.getRandomValues(new Uint8Array(12)))}`;
        const key = await bootstraps.derivedKey(id, attempt);
        await noted(key);
        const token = await bootstraps.issue(id, { script: launchScript(request, launch) }, BOOTSTRAP_TTL_MS, attempt);
        return { token, key, userData: bootUserData(bootstrapUrl, token, runnerProgram(request), opts.settings.download) };
      };
      const ctx: RebuildCtx = { api, notes, bootstraps, backend, label: names.label, signal };
      if (note?.rebuilding !== undefined && note.serverId !== undefined) {
        if (await resumeRebuild(ctx, { ...note, rebuilding: note.rebuilding, serverId: note.serverId }, boot, deps.now())) return "pending";
        throw new BackendError("its parked server went before its rebuild was answered; asking again");
      }
      if (note?.serverId !== undefined) return lookOnce(notes, names.label, { ...note, serverId: note.serverId }, signal);
      if (note?.creating !== undefined) {
        // The last pass asked for a create and lost its answer: the server of the name is adopted if it carries that create's bootstrap.
        const found = await ownByName(id, signal, "create");
        if (found && found.labels[LABELS.boot] === (await bootMark(note.creating))) return adoptServer(notes, names.label, found, note);
        // Else no server will boot from that bootstrap: it is revoked before another is issued, and a server of the name with an older one goes.
        await bootstraps.revoke(note.creating);
        if (found) {
          await removeSoon(found.id, signal);
          await notes.markDeleted(backend, names.label, found.id, deps.now());
        }
      }
      const fullUntil = (await figures.get(backend))?.fullUntil ?? 0;
      if (deps.now() < fullUntil)
        throw new ProjectFull(`the Hetzner project's server limit was reached; the next create is tried at ${new Date(fullUntil).toISOString()}`);
      const name = await serverName(deps.prefix, id, deps.instance, backend);
      const templates = [opts.template, request.pool?.template];
      const candidates: (Candidate | undefined)[] = request.pool?.candidates ?? [undefined];
      const pool = request.pool;
      const base = { name, label: names.label, pool: request.pool?.name, instance: deps.instance, backend };
      // What a rebuild of this pool's server starts from: the image its create body names.
      const image = pool?.reuse === "rebuild" ? String(createBody(base, "", templates, candidates[0]).image) : "";
      const reuseFrom = (paidFrom: number) => (pool?.reuse === "rebuild" ? { reuse: { pool: pool.name, image, paidFrom } } : {});
      // Noted before its token exists, and before a server is taken or made: a pass after a lost answer, and the sweep, know which server is this create's.
      const {
        token,
        userData,
        key: creating,
      } = await boot((key) => notes.put(backend, names.label, { id, createdAt: deps.now(), creating: key, ...reuseFrom(deps.now()) }));
      const mark = await bootMark(creating);
      const who = { ...base, boot: mark };
      if (pool?.reuse === "rebuild") {
        // A server of the pool whose job has finished, within its paid hour: rebuilt for this job.
        if (await takeParked(ctx, pool.name, { id, createdAt: deps.now() }, { token, userData, key: creating }, deps.now())) return "pending";
      }
      let server: HetznerServer | undefined;
      let lastNoRoom: HetznerError | undefined;
      /** A create refused (not sent, or answered 4xx): no server was made, so its bootstrap and note go, and the next pass asks Hetzner nothing first. */
      const refused = async () => {
        await bootstraps.revoke(creating);
        await notes.remove(backend, names.label);
      };
      for (const candidate of candidates) {
        try {
          server = await api.create(createBody(who, userData, templates, candidate), signal);
          break;
        } catch (err) {
          if (err instanceof RateBudgetExhausted) await refused();
          if (err instanceof HetznerError && err.code === "uniqueness_error") {
            // Asked before (an answer lost, a pass that died): the server of that name is this create's only if it carries its bootstrap.
            const found = await ownByName(id, signal, "create");
            if (!found) throw new BackendError("the server's name is taken, but by no server of this deployment's listed; trying again");
            if (found.labels[LABELS.boot] === mark) return adoptServer(notes, names.label, found, { id, createdAt: deps.now(), ...reuseFrom(deps.now()) });
            // An earlier create that landed late, its bootstrap revoked: it goes, and the next pass asks again.
            await removeSoon(found.id, signal);
            await notes.markDeleted(backend, names.label, found.id, deps.now());
            throw new BackendError("a late server of an earlier create held the name (its bootstrap revoked); deleted, asking again");
          }
          if (err instanceof HetznerError && NO_ROOM.has(err.code)) {
            lastNoRoom = err;
            continue;
          }
          if (err instanceof HetznerError && err.code === "resource_limit_exceeded") {
            const until = deps.now() + FULL_RECHECK_MS;
            await figures.change(backend, (f) => ({ ...f, fullTotal: f.fullTotal + 1, fullUntil: until }));
            await refused();
            throw new ProjectFull("the Hetzner project's server limit is reached: jobs wait until a server is deleted", err.status);
          }
          throw err;
        }
      }
      if (!server) await refused();
      if (!server) throw new BackendError(`no candidate has room (${lastNoRoom?.code ?? "none"}); trying again later`, lastNoRoom?.status);
      await notes.put(backend, names.label, { id, serverId: server.id, createdAt: deps.now(), ...reuseFrom(Date.parse(server.created) || deps.now()) });
      return "pending";
    }

    /** The server of this assignment's create, answered to a pass that died: noted, its age from its creation. */
    async function adoptServer(notes: Notes, label: string, server: HetznerServer, note: ServerNote): Promise<RunnerStatus> {
      const created = Date.parse(server.created) || deps.now();
      const reuse = note.reuse ? { reuse: { ...note.reuse, paidFrom: created } } : {};
      await notes.put(backend, label, { id: note.id, serverId: server.id, createdAt: Math.min(deps.now(), created), ...reuse });
      return "pending";
    }

    /** Pending until its claim, with one status read once it should be up: a server that ended is deleted and asked for again. */
    async function lookOnce(notes: Notes, label: string, note: ServerNote & { serverId: number }, signal: AbortSignal): Promise<RunnerStatus> {
      if (note.ready) return "ready";
      if (note.checked || deps.now() - note.createdAt < STATUS_READ_AFTER_MS) return "pending";
      const server = await api.get(note.serverId, signal);
      if (server && !ENDED.has(server.status)) {
        const ready = server.status === "running";
        await notes.put(backend, label, { ...note, checked: true, ...(ready ? { ready } : {}) });
        return ready ? "ready" : "pending";
      }
      if (server) await api.remove(server.id, signal);
      await notes.removeDeleted(backend, label, note.serverId, deps.now());
      throw new BackendError(`server ${server ? server.status : "gone"} before the claim; recreating`);
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
