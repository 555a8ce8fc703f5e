// The hetzner driver's accept: a server per assignment, from the templates and the first candidate
// with room, noted before it is asked (with the key of its one-time bootstrap) and after; a pass
// after a lost answer adopts the server of its name that carries that bootstrap's mark, before it
// would take a parked server. Pending until the claim, with one status read.
import { BackendError, BackendRefused, WorkloadUnneeded, type RunnerRequest, type RunnerStatus } from "../../domain/backend.ts";
import { fieldSource, forgetRefusals, shownValue, type FieldLayers } from "../refused-field.ts";
import { base64url } from "../../model/crypto.ts";
import type { DriverDeps, DriverStores } from "../driver-module.ts";
import { objectNames } from "../kubernetes/names.ts";
import { bootUserData, launchScript, runnerProgram, type RunnerDownload } from "../user-data.ts";
import { HetznerError, RateBudgetExhausted, type HetznerApi, type HetznerServer } from "./client.ts";
import type { Notes, ServerNote } from "./notes.ts";
import type { CallKind } from "./rate-budget.ts";
import { resumeRebuild, takeParked, type IssueBoot, type RebuildCtx } from "./reuse.ts";
import { bootMark, createBody, LABELS, serverName, type Candidate } from "./server-body.ts";

/** A server is looked at once, this long after its create, unless its claim came first. */
export const STATUS_READ_AFTER_MS = 90_000;
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

/** What an accept works with: the invocation's API client, and the driver's calls on it. */
export interface AcceptCtx {
  api: HetznerApi;
  deps: DriverDeps;
  backend: string;
  template: Record<string, unknown> | undefined;
  /** Where `template` was written (VM_TEMPLATE, or a named backend's own): refusals name it. */
  templateVariable: string;
  download: RunnerDownload | undefined;
  calls: {
    ownByName: (id: string, signal: AbortSignal, kind?: CallKind) => Promise<HetznerServer | undefined>;
    removeSoon: (serverId: number, signal: AbortSignal) => Promise<void>;
  };
  /** Told of an assignment whose server is a parked one rebuilt for it (RunnerBackend.made). */
  made?: (id: string) => void;
}

export async function acceptWith(
  c: AcceptCtx,
  notes: Notes,
  bootstraps: DriverStores["bootstraps"],
  figures: DriverStores["figures"],
  request: RunnerRequest,
  signal: AbortSignal,
): Promise<RunnerStatus> {
  const { api, deps, backend, template, download } = c;
  const { ownByName, removeSoon } = c.calls;
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
    return { token, key, userData: bootUserData(bootstrapUrl, token, runnerProgram(request), download) };
  };
  const ctx: RebuildCtx = { api, notes, bootstraps, backend, label: names.label, signal };
  if (note?.rebuilding !== undefined && note.serverId !== undefined) {
    if (await resumeRebuild(ctx, { ...note, rebuilding: note.rebuilding, serverId: note.serverId }, boot, deps.now())) return rebuiltFor(c, id);
    throw new BackendError("its parked server went before its rebuild was answered; asking again");
  }
  if (note?.serverId !== undefined) {
    if (note.rebuilt) c.made?.(id);
    return lookOnce(c, notes, names.label, { ...note, serverId: note.serverId }, signal);
  }
  if (note?.creating !== undefined) {
    // The last pass asked for a create and lost its answer: the server of the name is adopted if it carries that create's bootstrap.
    const found = await ownByName(id, signal, "create");
    if (found && found.labels[LABELS.boot] === (await bootMark(note.creating))) return adoptServer(c, notes, names.label, found, note);
    // Else no server will boot from that bootstrap: it is revoked before another is issued, and a server of the name with an older one goes.
    await bootstraps.revoke(note.creating);
    if (found) {
      await removeSoon(found.id, signal);
      await notes.markDeleted(backend, names.label, found.id, deps.now());
    }
  }
  const seen = await figures.get(backend);
  const fullUntil = seen?.fullUntil ?? 0;
  if (deps.now() < fullUntil)
    throw new ProjectFull(`the Hetzner project's server limit was reached; the next create is tried at ${new Date(fullUntil).toISOString()}`);
  const name = await serverName(deps.prefix, id, deps.instance, backend);
  const templates = [template, request.pool?.template];
  const candidates: (Candidate | undefined)[] = request.pool?.candidates ?? [undefined];
  const pool = request.pool;
  const base = { name, label: names.label, pool: request.pool?.name, instance: deps.instance, backend };
  // What a rebuild of this pool's server starts from: the image its create body names.
  const image = pool?.reuse === "rebuild" ? String(createBody(base, "", templates, candidates[0]).image) : "";
  const poolOf = pool ? { pool: pool.name } : {};
  const reuseFrom = (paidFrom: number) =>
    pool?.reuse === "rebuild" ? { reuse: { pool: pool.name, image, paidFrom, ...(pool.warmUntil !== undefined ? { warmUntil: pool.warmUntil } : {}) } } : {};
  // Noted before its token exists, and before a server is taken or made: a pass after a lost answer, and the sweep, know which server is this create's.
  const {
    token,
    userData,
    key: creating,
  } = await boot((key) => notes.put(backend, names.label, { id, ...poolOf, createdAt: deps.now(), creating: key, ...reuseFrom(deps.now()) }));
  const mark = await bootMark(creating);
  const who = { ...base, boot: mark };
  const bound = request.assignment.reuse?.server;
  if (pool?.reuse === "rebuild") {
    // A server of the pool whose job has finished, within its paid hour: rebuilt for this job.
    const from = { pool: pool.name, warmUntil: pool.warmUntil, only: bound };
    if (await takeParked(ctx, from, { id, createdAt: deps.now() }, { token, userData, key: creating }, deps.now())) return rebuiltFor(c, id);
  }
  if (bound !== undefined) {
    // A warm runner by reuse is made on its server or not at all: a new server would start a new hour.
    await bootstraps.revoke(creating);
    await notes.remove(backend, names.label);
    throw new WorkloadUnneeded(`server ${bound} is no longer parked: a job took it`);
  }
  let server: HetznerServer | undefined;
  let lastNoRoom: HetznerError | undefined;
  /** A create refused (not sent, or answered 4xx): no server was made, so its bootstrap and note go, and the next pass asks Hetzner nothing first. */
  const refused = async () => {
    await bootstraps.revoke(creating);
    await notes.remove(backend, names.label);
  };
  for (const [index, candidate] of candidates.entries()) {
    try {
      server = await api.create(createBody(who, userData, templates, candidate), signal);
      break;
    } catch (err) {
      if (err instanceof RateBudgetExhausted) await refused();
      if (err instanceof HetznerError && err.code === "uniqueness_error") {
        // Asked before (an answer lost, a pass that died): the server of that name is this create's only if it carries its bootstrap.
        const found = await ownByName(id, signal, "create");
        if (!found) throw new BackendError("the server's name is taken, but by no server of this deployment's listed; trying again");
        if (found.labels[LABELS.boot] === mark)
          return adoptServer(c, notes, names.label, found, { id, ...poolOf, createdAt: deps.now(), ...reuseFrom(deps.now()) });
        // An earlier create that landed late, its bootstrap revoked: it goes, and the next pass asks again.
        await removeSoon(found.id, signal);
        await notes.markDeleted(backend, names.label, found.id, deps.now());
        throw new BackendError("a late server of an earlier create held the name (its bootstrap revoked); deleted, asking again");
      }
      if (err instanceof HetznerError && NO_ROOM.has(err.code)) {
        lastNoRoom = err;
        continue;
      }
      if (err instanceof HetznerError && err.code === "invalid_input") {
        // What we sent was refused: a template's mistake, named where it was written; no server was made.
        await refused();
        throw invalidInput(c, err, request.pool, candidate && { index, value: candidate });
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
  await notes.put(backend, names.label, { id, ...poolOf, serverId: server.id, createdAt: deps.now(), ...reuseFrom(Date.parse(server.created) || deps.now()) });
  // A create that went through answers every refusal kept for /healthz: the token and the fields it used are good.
  if (seen?.refused) await forgetRefusals(figures, backend);
  return "pending";
}

/** Pending, on a parked server rebuilt for `id`. */
function rebuiltFor(c: AcceptCtx, id: string): RunnerStatus {
  c.made?.(id);
  return "pending";
}

/** invalid_input as a configuration problem: the first field Hetzner named, where it was set, and what Hetzner said of it. */
function invalidInput(c: AcceptCtx, err: HetznerError, pool: RunnerRequest["pool"], candidate: FieldLayers["candidate"]): BackendRefused {
  const field = err.fields[0];
  const where = fieldSource(field?.name ?? "?", { templateVariable: c.templateVariable, template: c.template, pool, candidate });
  const said = field?.messages[0] ? `: ${field.messages[0]}` : "";
  return new BackendRefused(
    `Hetzner refused ${where.variable}${shownValue(where.value)} (422 invalid_input${said})`,
    where.variable,
    "configuration",
    err.status,
  );
}

/** The server of this assignment's create, answered to a pass that died: noted, its age from its creation. */
async function adoptServer({ deps, backend }: AcceptCtx, notes: Notes, label: string, server: HetznerServer, note: ServerNote): Promise<RunnerStatus> {
  const created = Date.parse(server.created) || deps.now();
  const reuse = note.reuse ? { reuse: { ...note.reuse, paidFrom: created } } : {};
  const pool = note.pool ? { pool: note.pool } : {};
  await notes.put(backend, label, { id: note.id, ...pool, serverId: server.id, createdAt: Math.min(deps.now(), created), ...reuse });
  return "pending";
}

/** Pending until its claim, with one status read once it should be up: a server that ended is deleted and asked for again. */
async function lookOnce(
  { api, deps, backend }: AcceptCtx,
  notes: Notes,
  label: string,
  note: ServerNote & { serverId: number },
  signal: AbortSignal,
): Promise<RunnerStatus> {
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
