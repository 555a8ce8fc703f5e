// The ec2 driver's accept, teardown and sweep: one instance per assignment, asked for by attempts
// (each candidate on the pool's market, then on-demand where the pool falls back) whose ClientToken
// is derived from the assignment, the round and the attempt. The attempt is noted before it is
// asked and the instance id after, so a pass cut short anywhere asks again with the same token and
// EC2 answers with the instance it made: accepting twice makes one instance.
import type { KV } from "@nats-io/kv";
import { BackendError, BackendRefused, type RunnerBackend, type RunnerRequest, type RunnerStatus } from "../../domain/backend.ts";
import { fieldSource, forgetRefusals, shownValue } from "../refused-field.ts";
import { driverNoteKey } from "../../nats/names.ts";
import { readJson } from "../../state/kv.ts";
import type { DriverDeps, DriverStores } from "../driver-module.ts";
import { objectNames } from "../kubernetes/names.ts";
import { bootUserData, launchScript, runnerProgram, type RunnerDownload } from "../user-data.ts";
import { createEc2Api, Ec2Error, type Ec2Api } from "./client.ts";
import { attemptsOf, clientToken, runBody, TAGS } from "./run-body.ts";
import type { InstanceNote } from "./note.ts";
import { LIVE_STATES, sweepInstances } from "./sweep.ts";
import { refreshOffer } from "./offer.ts";

/** What an offer is read from: the region and the API that answers for it. */
export const offerOf = (s: { region: string; url: string }) => `${s.region} ${s.url}`;

export type { InstanceNote };

/** The RunInstances parameter a refusal names: by its code, or by the parameter its message names (InvalidParameterValue). */
function refusedField(err: Ec2Error): string | undefined {
  const byCode = FIELD_OF_CODE.find(([prefix]) => err.code.startsWith(prefix))?.[1];
  if (byCode) return byCode;
  if (err.code !== "InvalidParameterValue" && err.code !== "InvalidParameterCombination") return undefined;
  // "Invalid value 'm9z.huge' for InstanceType." (a value EC2 does not know), or "Value (x) for
  // parameter instanceType is invalid." (one it cannot parse): the parameter, in either case.
  const m = /for parameter (\w+)|Invalid value '[^']*' for (\w+)/.exec(err.said);
  const named = m?.[1] ?? m?.[2];
  return named ? named[0]!.toUpperCase() + named.slice(1) : "(a RunInstances parameter)";
}

const FIELD_OF_CODE: [string, string][] = [
  ["InvalidAMIID.", "ImageId"],
  ["InvalidSubnetID.", "SubnetId"],
  ["InvalidSubnet.", "SubnetId"],
  ["InvalidGroup.", "SecurityGroupIds"],
  ["InvalidGroupId.", "SecurityGroupIds"],
  ["InvalidSecurityGroupID.", "SecurityGroupIds"],
  ["InvalidKeyPair.", "KeyName"],
];

export interface Ec2Settings {
  url: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  template: Record<string, unknown> | undefined;
  download: RunnerDownload | undefined;
}

/** An instance is looked at once, this long after its create, unless its claim came first. */
export const STATUS_READ_AFTER_MS = 90_000;
export const BOOTSTRAP_TTL_MS = 30 * 60_000;
/** After the account's limit refused a create, the next is tried this much later. */
export const FULL_RECHECK_MS = 30_000;
/** No room for this candidate on this market: the next attempt is tried in the same pass. */
export const NO_ROOM = new Set([
  "InsufficientInstanceCapacity",
  "InsufficientFreeAddressesInSubnet",
  "MaxSpotInstanceCountExceeded",
  "SpotMaxPriceTooLow",
  "Unsupported",
]);
/** The account's instance or vCPU limit: a full backend. */
const LIMITS = new Set(["InstanceLimitExceeded", "VcpuLimitExceeded"]);
/** States of an instance that will not run its runner. */
const ENDED = new Set(["shutting-down", "terminated", "stopping", "stopped"]);
/** A round's bootstrap is renewed (a new round) once less than this is left of it: an instance made with it has this long to boot. */
export const BOOT_ALLOWANCE_MS = 10 * 60_000;

/** The account's instance or vCPU limit: a full backend, not a failure. */
export class AccountFull extends BackendError {
  readonly full = true;
}

export function createEc2Driver(opts: {
  backend: string;
  settings: Ec2Settings;
  template: Record<string, unknown> | undefined;
  /** Where the template was written: VM_TEMPLATE, or BACKENDS[i].template. */
  templateVariable?: string;
  deps: DriverDeps;
}) {
  const { deps, backend, settings } = opts;
  const api: Ec2Api = createEc2Api({ ...settings, ...(deps.fetch ? { fetch: deps.fetch } : {}) });
  const withStores = <T>(fn: (s: DriverStores) => Promise<T>): Promise<T> => {
    if (!deps.withStores) throw new BackendError("the ec2 driver needs the dispatcher's stores");
    return deps.withStores(fn);
  };
  const noteOf = async (kv: KV, label: string) => (await readJson<InstanceNote>(kv, driverNoteKey(backend, label)))?.value;
  const putNote = (kv: KV, label: string, note: InstanceNote) => kv.put(driverNoteKey(backend, label), JSON.stringify(note)).then(() => undefined);
  const tagged = (label: string) => [
    { Name: `tag:${TAGS.instance}`, Values: [deps.instance] },
    { Name: `tag:${TAGS.backend}`, Values: [backend] },
    { Name: `tag:${TAGS.assignment}`, Values: [label] },
    { Name: "instance-state-name", Values: LIVE_STATES },
  ];

  /** Ends the instance(s) of `label`; the note goes on to the next round, so that asking again makes a new instance. */
  const end = async (kv: KV, label: string, note: InstanceNote | undefined, signal: AbortSignal, nextAttempt = 0) => {
    // An attempt asked but not answered may have made one: found by its tags.
    const ids = note?.instanceId ? [note.instanceId] : (await api.describeAll({ Filters: tagged(label) }, signal)).map((i) => i.id);
    for (const instanceId of ids) await api.terminate(instanceId, signal);
    if (note) await putNote(kv, label, { id: note.id, round: note.round + 1, attempt: nextAttempt, createdAt: deps.now() });
  };

  const driver: RunnerBackend & { api: Ec2Api } = {
    api,
    accept: (request, signal) => withStores((s) => acceptWith(s, request, signal)),
    teardown: (id, signal) =>
      withStores(async ({ kv }) => {
        const { label } = await objectNames(deps.prefix, id);
        await end(kv, label, await noteOf(kv, label), signal);
      }),
    tick: (ask) =>
      withStores(async (s) => {
        const swept = await sweepInstances({ api, backend, instance: deps.instance, now: deps.now, putNote }, s, ask);
        // Not read this tick (the API, the policy): the kept offer stands, and the next tick asks again.
        const launching = { of: offerOf(settings), templateVariable: opts.templateVariable ?? "VM_TEMPLATE", template: opts.template, pools: ask.pools ?? [] };
        await refreshOffer({ api, figures: s.figures, backend, now: deps.now, signal: ask.signal }, launching).catch(() => undefined);
        return swept;
      }),
  };
  return driver;

  async function acceptWith({ kv, bootstraps, figures }: DriverStores, request: RunnerRequest, signal: AbortSignal): Promise<RunnerStatus> {
    const id = request.assignment.id;
    const { label } = await objectNames(deps.prefix, id);
    const incarnation = request.claimToken.slice(0, request.claimToken.indexOf("."));
    let note = await noteOf(kv, label);
    if (note?.incarnation !== undefined && note.incarnation !== incarnation) {
      // Its runner was interrupted before the claim: the old instance ends before a new one is
      // asked for (one runner at a time), on the next candidate unless the pool falls back to on-demand.
      const next = request.pool?.market === "on-demand" ? 0 : (note.attempt + 1) % attemptsOf(request.pool).length;
      await end(kv, label, note, signal, next);
      note = await noteOf(kv, label);
    }
    if (note?.instanceId) return lookOnce(kv, label, { ...note, instanceId: note.instanceId }, signal);
    const { launch, bootstrapUrl } = request;
    if (!launch || !bootstrapUrl) throw new BackendError("no runner identity: the ec2 driver needs a forge (GITEA_URL)");
    const seen = await figures.get(backend);
    const fullUntil = seen?.fullUntil ?? 0;
    if (deps.now() < fullUntil) throw new AccountFull(`the EC2 account's limit was reached; the next create is tried at ${new Date(fullUntil).toISOString()}`);
    // A pass cut short resumes at its attempt with the same ClientToken and the same UserData (its
    // bootstrap token derived for the round), as an idempotent RunInstances must; a new round starts from the first.
    const issue = async (round: number) => {
      const token = await bootstraps.issue(id, { script: launchScript(request, launch, { watch: "ec2-spot" }) }, BOOTSTRAP_TTL_MS, `ec2:${round}`);
      return { token, key: await bootstraps.keyOf(token) };
    };
    let round = note?.round ?? 0;
    let { token, key } = await issue(round);
    const stale = note?.boot !== undefined && deps.now() - (note.issuedAt ?? 0) > BOOTSTRAP_TTL_MS - BOOT_ALLOWANCE_MS;
    if (note?.boot !== undefined && (note.boot !== key || stale)) {
      // The attempt in flight was made with another token (a key rotation) or one about to expire: its instance, if it made one, is kept; else a new round.
      if (note.boot !== key) await bootstraps.revoke(key);
      if (await settle(kv, label, note, bootstraps, signal)) return "pending";
      round = note.round + 1;
      ({ token, key } = await issue(round));
    }
    const issuedAt = note?.boot === key && note.round === round ? (note.issuedAt ?? deps.now()) : deps.now();
    const userData = bootUserData(bootstrapUrl, token, runnerProgram(request), settings.download);
    const who = { label, pool: request.pool?.name, instance: deps.instance, backend };
    const attempts = attemptsOf(request.pool);
    let lastNoRoom: Ec2Error | undefined;
    for (let i = note?.round === round ? note.attempt : 0; i < attempts.length; i++) {
      const base: InstanceNote = { id, round, attempt: i, incarnation, boot: key, issuedAt, createdAt: deps.now() };
      await putNote(kv, label, base);
      try {
        const body = runBody(who, userData, [opts.template, request.pool?.template], attempts[i]!, await clientToken(deps.instance, id, round, i));
        const instance = await api.runInstances(body, signal);
        await putNote(kv, label, { ...base, instanceId: instance.id });
        // A create that went through answers every refusal kept for /healthz.
        if (seen?.refused) await forgetRefusals(figures, backend);
        return "pending";
      } catch (err) {
        if (err instanceof Ec2Error && err.code === "IdempotentParameterMismatch") {
          // This attempt's ClientToken was used with other parameters (a new template, a deploy between): never asked again as it is.
          if (await settle(kv, label, base, bootstraps, signal)) return "pending";
          throw new BackendError("an earlier request of this attempt had other parameters and made no live instance; asking again in a new round");
        }
        if (err instanceof Ec2Error && NO_ROOM.has(err.code)) {
          lastNoRoom = err;
          continue;
        }
        const field = err instanceof Ec2Error ? refusedField(err) : undefined;
        if (field) {
          // What we sent was refused: a template's mistake, named where it was written; no instance was made.
          const a = attempts[i]!;
          const candidateIndex = a.candidate ? (request.pool?.candidates ?? []).indexOf(a.candidate) : -1;
          const where = fieldSource(field, {
            templateVariable: opts.templateVariable ?? "VM_TEMPLATE",
            template: opts.template,
            pool: request.pool,
            candidate: a.candidate && candidateIndex >= 0 ? { index: candidateIndex, value: a.candidate } : undefined,
          });
          throw new BackendRefused(
            `EC2 refused ${where.variable}${shownValue(where.value)} (${(err as Ec2Error).code})`,
            where.variable,
            "configuration",
            (err as Ec2Error).status,
          );
        }
        if (err instanceof Ec2Error && LIMITS.has(err.code)) {
          const until = deps.now() + FULL_RECHECK_MS;
          await figures.change(backend, (f) => ({ ...f, fullTotal: f.fullTotal + 1, fullUntil: until }));
          throw new AccountFull(
            `the EC2 account's ${err.code === "VcpuLimitExceeded" ? "vCPU" : "instance"} limit is reached: jobs wait until an instance ends`,
            err.status,
          );
        }
        throw err;
      }
    }
    await putNote(kv, label, { id, round: round + 1, attempt: 0, createdAt: deps.now() });
    throw new BackendError(`no candidate has room (${lastNoRoom?.code ?? "none"}); trying again later`, lastNoRoom?.status);
  }

  /**
   * The attempt `note` names may have made an instance (a lost answer, a deploy between): found by
   * its ClientToken, it is kept (noted) if live. Else its bootstrap is revoked and the next pass asks
   * in a new round, with a new token: no refused request is ever repeated.
   */
  async function settle(kv: KV, label: string, note: InstanceNote, bootstraps: DriverStores["bootstraps"], signal: AbortSignal): Promise<boolean> {
    const token = await clientToken(deps.instance, note.id, note.round, note.attempt);
    const made = await api.describeAll({ Filters: [...tagged(label), { Name: "client-token", Values: [token] }] }, signal);
    const live = made.find((i) => i.state === "pending" || i.state === "running");
    if (live) {
      await putNote(kv, label, { ...note, instanceId: live.id, createdAt: Math.min(deps.now(), Date.parse(live.launchTime) || deps.now()) });
      return true;
    }
    for (const i of made) await api.terminate(i.id, signal);
    if (note.boot !== undefined) await bootstraps.revoke(note.boot);
    await putNote(kv, label, { id: note.id, round: note.round + 1, attempt: 0, createdAt: deps.now() });
    return false;
  }

  /** Pending until its claim, with one status read once it should be up: an instance that ended is asked for again. */
  async function lookOnce(kv: KV, label: string, note: InstanceNote & { instanceId: string }, signal: AbortSignal): Promise<RunnerStatus> {
    if (note.ready) return "ready";
    if (note.checked || deps.now() - note.createdAt < STATUS_READ_AFTER_MS) return "pending";
    const [instance] = await api.describeAll({ InstanceIds: [note.instanceId] }, signal).catch((err: unknown) => {
      if (err instanceof Ec2Error && err.code === "InvalidInstanceID.NotFound") return [];
      throw err;
    });
    if (instance && !ENDED.has(instance.state)) {
      const ready = instance.state === "running";
      await putNote(kv, label, { ...note, checked: true, ...(ready ? { ready } : {}) });
      return ready ? "ready" : "pending";
    }
    if (instance) await api.terminate(instance.id, signal);
    // A new round: its tokens are new, so the next create is a new instance.
    await putNote(kv, label, { id: note.id, round: note.round + 1, attempt: 0, createdAt: deps.now() });
    throw new BackendError(
      `instance ${instance ? instance.state : "gone"} before the claim${instance?.stateReason ? ` (${instance.stateReason})` : ""}; recreating`,
    );
  }
}
