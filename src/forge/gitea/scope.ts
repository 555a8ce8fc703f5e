// Where in Gitea a runner is registered, and so which jobs Gitea hands it: every job of the
// instance (or of GITEA_SCOPE), only its owner's, or only its repository's. A runner registered at
// a repository never sees another repository's job or secrets. Owner and repository names are
// case-insensitive in Gitea: keys are lower case, so "Acme" and "acme" are one scope.

export const RUNNER_SCOPES = ["instance", "owner", "repository"] as const;
/** RUNNER_SCOPE: where each job's runner is registered. */
export type RunnerScope = (typeof RUNNER_SCOPES)[number];

/** A place in Gitea's API where runners are registered, listed and deleted. */
export type GiteaScope = { kind: "admin" } | { kind: "org"; org: string } | { kind: "user"; user: string } | { kind: "repo"; owner: string; repo: string };

/** Where a runner is to be registered: a scope, or an owner Gitea has yet to say is an organisation or a user. */
export type RegistrationScope = GiteaScope | { kind: "owner"; owner: string };

const lower = (s: string) => s.toLowerCase();

/** "admin" | "org:<name>" | "user:<name>" | "repo:<owner>/<name>" | "owner:<name>", lower case. */
export function scopeKey(s: RegistrationScope): string {
  switch (s.kind) {
    case "admin":
      return "admin";
    case "org":
      return `org:${lower(s.org)}`;
    case "user":
      return `user:${lower(s.user)}`;
    case "owner":
      return `owner:${lower(s.owner)}`;
    case "repo":
      return `repo:${lower(s.owner)}/${lower(s.repo)}`;
  }
}

/** A scope key or GITEA_SCOPE value (already checked by its schema); anything else is the admin scope. */
export function parseScope(text: string): GiteaScope {
  const [kind, rest = ""] = text.split(/:(.*)/s);
  if (kind === "org") return { kind: "org", org: rest };
  if (kind === "user") return { kind: "user", user: rest };
  if (kind === "repo") {
    const [owner = "", repo = ""] = rest.split("/");
    return { kind: "repo", owner, repo };
  }
  return { kind: "admin" };
}

/**
 * Where the runner of a job of `repository` ("owner/name") is registered under `mode`; `fixed`
 * (GITEA_SCOPE, or a pool's own scope) for `instance`, and for a runner with no job (warm).
 */
export function registrationScope(mode: RunnerScope, fixed: GiteaScope, repository: string | undefined): RegistrationScope {
  const [owner, repo] = repository?.split("/") ?? [];
  if (mode === "instance" || !owner || !repo) return fixed;
  return mode === "owner" ? { kind: "owner", owner: lower(owner) } : { kind: "repo", owner: lower(owner), repo: lower(repo) };
}

/** The scope key a pool's warm runners are registered at: its own scope, else GITEA_SCOPE's. */
export function warmScopeKey(poolScope: string | undefined, giteaScope: GiteaScope): string {
  return scopeKey(poolScope ? parseScope(poolScope) : giteaScope);
}

/** Whether the runner list of `listing` (GITEA_SCOPE) shows a runner registered at `key` (absent: at GITEA_SCOPE itself). */
export function listedBy(listing: GiteaScope, key: string | undefined): boolean {
  return key === undefined || listing.kind === "admin" || scopeKey(listing) === key;
}

/** The REST path under which a scope's runners are, and the Sudo user that path needs (the user scope). */
export function scopePath(scope: GiteaScope): { path: string; sudo?: string } {
  const e = encodeURIComponent;
  if (scope.kind === "org") return { path: `/api/v1/orgs/${e(scope.org)}/actions` };
  if (scope.kind === "repo") return { path: `/api/v1/repos/${e(scope.owner)}/${e(scope.repo)}/actions` };
  // A user's own runners: an administrator's token acts as that user (Gitea's Sudo header).
  if (scope.kind === "user") return { path: "/api/v1/user/actions", sudo: scope.user };
  return { path: "/api/v1/admin/actions" };
}
