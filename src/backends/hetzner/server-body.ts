// The body of `POST /servers` for one assignment: the backend's template, then the pool's, then the
// candidate (server type and location) tried now, then what the dispatcher decides itself (the
// name, its labels, user_data), which no template may change. Checked against Hetzner's own API
// description, as the real API would check it.
import { checkAgainst } from "../api-schema.ts";
import { objectNames } from "../kubernetes/names.ts";
import hcloud from "./upstream/hcloud-servers.json" with { type: "json" };

/** What a template (VM_TEMPLATE, a named backend's, a pool's) may set of the create body. */
export const TEMPLATE_FIELDS = ["server_type", "image", "location", "ssh_keys", "firewalls", "networks", "public_net", "placement_group", "labels"] as const;
/** Set by the dispatcher alone. */
const OURS = ["name", "user_data", "start_after_create"];

/** Label keys the dispatcher owns on its servers; a template's label of the same key is refused. */
export const LABELS = {
  managedBy: "managed-by",
  assignment: "gdr-assignment",
  pool: "gdr-pool",
  instance: "gdr-instance",
  backend: "gdr-backend",
  boot: "gdr-boot",
} as const;
export const MANAGED_BY = "gitea-edge-dispatcher";

/** A pool's placement: its server_type and location (the keys CANDIDATE_KEYS). */
export type Candidate = Record<string, string>;
export const CANDIDATE_KEYS = ["server_type", "location"];

export interface ServerIdentity {
  /** The server's name: a hostname of at most 63 characters (kubernetes/names.ts objectNames). */
  name: string;
  /** The assignment's label value (objectNames' label). */
  label: string;
  pool?: string | undefined;
  /** This dispatcher's instance: two in one project never touch each other's servers. */
  instance: string;
  /** The backend it is for: two backends of one dispatcher in one project sweep their own. */
  backend: string;
  /** The mark of the bootstrap in its user_data (bootMark): which of an assignment's creates a server is. */
  boot?: string | undefined;
}

type Body = Record<string, unknown>;

/** The create body for `who`, from the templates and the candidate, with `userData`. */
export function createBody(who: ServerIdentity, userData: string, templates: readonly (Body | undefined)[], candidate?: Candidate): Body {
  const merged: Body = {};
  const labels: Record<string, string> = {};
  for (const t of templates) {
    if (!t) continue;
    for (const [k, v] of Object.entries(t)) {
      if (k === "labels") Object.assign(labels, v as Record<string, string>);
      else merged[k] = v;
    }
  }
  return {
    ...merged,
    ...(candidate ?? {}),
    name: who.name,
    labels: { ...labels, ...ownLabels(who) },
    user_data: userData,
    start_after_create: true,
  };
}

/** The labels that mark a server as this dispatcher's, for `who`'s assignment. */
export function ownLabels(who: ServerIdentity): Record<string, string> {
  return {
    [LABELS.managedBy]: MANAGED_BY,
    [LABELS.instance]: who.instance,
    [LABELS.backend]: who.backend,
    [LABELS.assignment]: who.label,
    ...(who.pool ? { [LABELS.pool]: who.pool } : {}),
    ...(who.boot ? { [LABELS.boot]: who.boot } : {}),
  };
}

/** Whether a listed or named server is this deployment's and this backend's: no other is ever adopted, parked, rebuilt or deleted. */
export const isOurs = (labels: Record<string, string>, instance: string, backend: string) =>
  labels[LABELS.managedBy] === MANAGED_BY && labels[LABELS.instance] === instance && labels[LABELS.backend] === backend;

const hex = async (text: string, chars: number) =>
  Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text))), (b) => b.toString(16).padStart(2, "0"))
    .join("")
    .slice(0, chars);

/**
 * A server's name: the assignment's (kubernetes/names.ts objectNames) under a prefix that carries
 * a hash of the deployment and backend, so that two deployments in one project whose job ids
 * overlap never ask for the same name.
 */
export async function serverName(prefix: string, id: string, instance: string, backend: string): Promise<string> {
  return (await objectNames(`${prefix}-${await hex(`${instance}\n${backend}`, 6)}`, id)).name;
}

/** A label value that tells one bootstrap from another (a hash of its key, itself a hash: no secret). */
export const bootMark = (bootstrapKey: string) => hex(bootstrapKey, 16);

/** The label selector of every server of this dispatcher's instance (the orphan sweep's list). */
export const instanceSelector = (instance: string) => `${LABELS.managedBy}=${MANAGED_BY},${LABELS.instance}=${instance}`;

/** Problems of a create body against Hetzner's API description, each "<field> <what>". */
export function checkCreateBody(body: Body): string[] {
  // The two a template must give are named with where to give them.
  const problems = checkAgainst(hcloud, "create_server_request", body).filter((p) => p !== "server_type is required" && p !== "image is required");
  for (const k of ["server_type", "image"]) if (body[k] === undefined) problems.push(`${k} is required: set it in the template or the pool's candidates`);
  return problems;
}

/** Problems of a template (`name` says which variable), checked when the configuration is read. */
export function checkTemplate(name: string, template: unknown): string[] {
  if (typeof template !== "object" || template === null || Array.isArray(template)) return [`${name} must be a JSON object (a partial create-server body)`];
  const problems: string[] = [];
  for (const k of Object.keys(template)) {
    if (OURS.includes(k)) problems.push(`${name}["${k}"] is set by the dispatcher, not by a template`);
    else if (!(TEMPLATE_FIELDS as readonly string[]).includes(k))
      problems.push(`${name}["${k}"] is not a field a template may set (${TEMPLATE_FIELDS.join(", ")})`);
  }
  const labels = (template as Body).labels;
  if (labels && typeof labels === "object")
    for (const k of Object.keys(labels))
      if ((Object.values(LABELS) as string[]).includes(k)) problems.push(`${name}["labels"]["${k}"] is the dispatcher's own label`);
  if (problems.length) return problems;
  // Checked as part of a body, with placeholders for what the dispatcher sets.
  const sample = { name: "template-check", server_type: "cx22", image: "ubuntu-24.04", ...(template as Body) };
  return checkAgainst(hcloud, "create_server_request", sample).map((p) => `${name}: ${p}`);
}
