// QUOTAS: concurrent-runner limits per owner and per repository, and each owner's weight in the
// fair share of a full backend. Gitea's owner and repository names are case-insensitive, so the
// configuration is read in lower case, and two entries that differ only in case are a problem.
// Lookups go through Maps: an owner named like an Object.prototype member ("constructor") is just
// another owner.
import { z } from "zod";
import { parseJsonVariable } from "../model/json-variable.ts";

const NAME = /^[A-Za-z0-9_.-]{1,100}$/;
const limit = z.number().int().min(0);
const weight = z.number().gt(0, { message: "must be above 0" }).max(1_000);

const quotasSchema = z.strictObject({
  /** Limits for every owner and repository not named below; unset: none. */
  default: z.strictObject({ owner: limit.optional(), repository: limit.optional() }).default({}),
  owners: z
    .record(z.string().regex(NAME, { message: "must be a Gitea owner name" }), z.strictObject({ limit: limit.optional(), weight: weight.default(1) }))
    .default({}),
  repositories: z
    .record(
      z.string().regex(/^[A-Za-z0-9_.-]{1,100}\/[A-Za-z0-9_.-]{1,100}$/, { message: 'must be "owner/name"' }),
      z.strictObject({ limit: limit.optional() }),
    )
    .default({}),
});

/** Limits and weights, keyed in lower case. */
export interface Quotas {
  defaultOwnerLimit?: number;
  defaultRepositoryLimit?: number;
  owners: ReadonlyMap<string, { limit?: number; weight: number }>;
  repositories: ReadonlyMap<string, { limit?: number }>;
}

export const NO_QUOTAS: Quotas = { owners: new Map(), repositories: new Map() };

/** The quotas of QUOTAS, or NO_QUOTAS when unset; undefined with `problems` added, each naming its path. */
export function parseQuotas(raw: string | undefined, problems: string[]): Quotas | undefined {
  if (raw === undefined || raw.trim() === "") return NO_QUOTAS;
  const parsed = parseJsonVariable("QUOTAS", raw, quotasSchema, problems);
  if (!parsed) return undefined;
  const before = problems.length;
  const owners = lowerKeys("owners", parsed.owners, problems);
  const repositories = lowerKeys("repositories", parsed.repositories, problems);
  if (problems.length > before) return undefined;
  return {
    ...(parsed.default.owner !== undefined ? { defaultOwnerLimit: parsed.default.owner } : {}),
    ...(parsed.default.repository !== undefined ? { defaultRepositoryLimit: parsed.default.repository } : {}),
    owners,
    repositories,
  };
}

function lowerKeys<T>(field: string, entries: Record<string, T>, problems: string[]): Map<string, T> {
  const out = new Map<string, T>();
  const first = new Map<string, string>();
  for (const [name, value] of Object.entries(entries)) {
    const key = name.toLowerCase();
    const seen = first.get(key);
    if (seen !== undefined) {
      problems.push(`QUOTAS.${field}: ${JSON.stringify(seen)} and ${JSON.stringify(name)} are the same (Gitea names are case-insensitive)`);
      continue;
    }
    first.set(key, name);
    out.set(key, value);
  }
  return out;
}

/** The owner and repository ("owner/name") of a job's repository, lower case; undefined for none. */
export function ownerOf(repository: string | undefined): { owner: string; repository: string } | undefined {
  const [owner, name] = repository?.toLowerCase().split("/") ?? [];
  return owner && name ? { owner, repository: `${owner}/${name}` } : undefined;
}

/** Jobs with no repository (published through the API) count as one owner of their own, `-`. */
export const NO_REPOSITORY = { owner: "-", repository: "-/-" } as const;

/** Whose a job is, lower case: its repository's owner, or NO_REPOSITORY. */
export function whoseJob(repository: string | undefined): { owner: string; repository: string } {
  return ownerOf(repository) ?? NO_REPOSITORY;
}

/** The concurrent-runner limits that apply to a job of `repository` (undefined: no limit). */
export function limitsOf(q: Quotas, repository: string): { owner?: number; repository?: number } {
  const at = ownerOf(repository);
  if (!at) return {};
  const owner = q.owners.get(at.owner)?.limit ?? q.defaultOwnerLimit;
  const repo = q.repositories.get(at.repository)?.limit ?? q.defaultRepositoryLimit;
  return { ...(owner !== undefined ? { owner } : {}), ...(repo !== undefined ? { repository: repo } : {}) };
}

/** Whether any concurrent-runner limit is set (the ledger is used only then). */
export function hasLimits(q: Quotas): boolean {
  return (
    q.defaultOwnerLimit !== undefined ||
    q.defaultRepositoryLimit !== undefined ||
    [...q.owners.values()].some((o) => o.limit !== undefined) ||
    [...q.repositories.values()].some((r) => r.limit !== undefined)
  );
}

/** QUOTAS as the fair share reads it. */
export function shareRules(q: Quotas): { weight(owner: string): number; limits(repository: string): { owner?: number; repository?: number } } {
  return { weight: (owner) => weightOf(q, owner), limits: (repository) => limitsOf(q, repository) };
}

/** An owner's weight in the fair share (1 unless QUOTAS says otherwise). */
export function weightOf(q: Quotas, owner: string): number {
  return q.owners.get(owner.toLowerCase())?.weight ?? 1;
}
