// The input of RunInstances for one attempt of one assignment: the backend's template, then the
// pool's, then the candidate (InstanceType, SubnetId) and market tried now, then what the
// dispatcher decides itself, which no template may change: one instance, its ClientToken, its tags
// on the instance and its volumes, its one-time bootstrap in UserData, a shutdown that terminates
// it, and IMDSv2 only. Checked against the EC2 service model (query.ts), as EC2 would check it.
import { sha256Key } from "../../model/crypto.ts";
import { checkRequest } from "./query.ts";

/** Set by the dispatcher alone. */
const OURS = [
  "MinCount",
  "MaxCount",
  "ClientToken",
  "UserData",
  "TagSpecifications",
  "InstanceMarketOptions",
  "InstanceInitiatedShutdownBehavior",
  "MetadataOptions",
  "DryRun",
];
/** A template's own tags, as a plain map (not a RunInstances member: merged into TagSpecifications). */
export const TEMPLATE_TAGS = "Tags";
/** A pool's placement: its InstanceType and SubnetId. */
export const CANDIDATE_KEYS = ["InstanceType", "SubnetId"];

/** Tag keys the dispatcher owns on its instances and their volumes; a template's tag of the same key is refused. */
export const TAGS = { managedBy: "managed-by", assignment: "gdr-assignment", pool: "gdr-pool", instance: "gdr-instance", backend: "gdr-backend" } as const;
export const MANAGED_BY = "gitea-edge-dispatcher";

export interface InstanceIdentity {
  /** The assignment's label value (kubernetes/names.ts objectNames). */
  label: string;
  pool?: string | undefined;
  /** This dispatcher's instance: two in one account never touch each other's instances. */
  instance: string;
  backend: string;
}

type Body = Record<string, unknown>;

/** One way to ask: a candidate (or none) on a market. */
export interface Attempt {
  candidate?: Record<string, string> | undefined;
  market: "spot" | "on-demand";
}

/** The attempts of a pool, in order: each candidate on its market, then, with spotFallback, each again on-demand. */
export function attemptsOf(pool: { candidates?: Record<string, string>[]; market?: "spot" | "on-demand"; spotFallback?: "on-demand" } | undefined): Attempt[] {
  const candidates = pool?.candidates ?? [undefined];
  const market = pool?.market ?? "on-demand";
  const first = candidates.map((candidate) => ({ candidate, market }));
  return market === "spot" && pool?.spotFallback === "on-demand"
    ? [...first, ...candidates.map((candidate) => ({ candidate, market: "on-demand" as const }))]
    : first;
}

/**
 * The ClientToken of an assignment's attempt (at most 64 characters): the same for the same
 * assignment, round and attempt, so that asking again makes no second instance; a hash, so that
 * distinct assignments never share one.
 */
export async function clientToken(instance: string, id: string, round: number, attempt: number): Promise<string> {
  const h = await sha256Key(`${instance}\n${id}`);
  return `gdr-${h.slice(0, 40)}-${round}-${attempt}`;
}

/** The RunInstances input for `who`'s attempt, from the templates, with `userData` (the boot script). */
export function runBody(who: InstanceIdentity, userData: string, templates: readonly (Body | undefined)[], attempt: Attempt, token: string): Body {
  const merged: Body = {};
  const tags: Record<string, string> = {};
  for (const t of templates) {
    if (!t) continue;
    for (const [k, v] of Object.entries(t)) {
      if (k === TEMPLATE_TAGS) Object.assign(tags, v as Record<string, string>);
      else merged[k] = v;
    }
  }
  const all = Object.entries({ ...tags, ...ownTags(who) }).map(([Key, Value]) => ({ Key, Value }));
  return {
    ...merged,
    ...(attempt.candidate ?? {}),
    ClientToken: token,
    UserData: btoa(userData),
    TagSpecifications: [
      { ResourceType: "instance", Tags: all },
      { ResourceType: "volume", Tags: all },
    ],
    ...(attempt.market === "spot"
      ? { InstanceMarketOptions: { MarketType: "spot", SpotOptions: { SpotInstanceType: "one-time", InstanceInterruptionBehavior: "terminate" } } }
      : {}),
    InstanceInitiatedShutdownBehavior: "terminate",
    MetadataOptions: { HttpTokens: "required", HttpEndpoint: "enabled" },
  };
}

/** The tags that mark an instance as this dispatcher's, for `who`'s assignment. */
export function ownTags(who: InstanceIdentity): Record<string, string> {
  return {
    [TAGS.managedBy]: MANAGED_BY,
    [TAGS.assignment]: who.label,
    [TAGS.instance]: who.instance,
    [TAGS.backend]: who.backend,
    ...(who.pool ? { [TAGS.pool]: who.pool } : {}),
  };
}

/** Problems of a template (`name` says whose): a field the dispatcher sets, or a tag it owns. */
export function checkTemplate(name: string, template: Body): string[] {
  const problems: string[] = [];
  for (const k of Object.keys(template)) if (OURS.includes(k)) problems.push(`${name}["${k}"] is set by the dispatcher, not by a template`);
  const tags = template[TEMPLATE_TAGS];
  if (tags !== undefined) {
    if (typeof tags !== "object" || tags === null || Array.isArray(tags) || Object.values(tags).some((v) => typeof v !== "string"))
      problems.push(`${name}["${TEMPLATE_TAGS}"] must be an object of strings`);
    else
      for (const k of Object.keys(tags))
        if (Object.values(TAGS).includes(k as never)) problems.push(`${name}["${TEMPLATE_TAGS}"]["${k}"] is a tag the dispatcher sets`);
  }
  return problems;
}

/** Problems of a RunInstances input as the model sees them, and the members it needs from a template. */
export function checkRunBody(body: Body): string[] {
  const problems = ["ImageId", "InstanceType"]
    .filter((k) => body[k] === undefined)
    .map((k) => `${k} is required: set it in the template or the pool's candidates`);
  return [...problems, ...checkRequest("RunInstances", { ...body, MinCount: 1, MaxCount: 1 })];
}
