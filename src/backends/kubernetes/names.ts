// Kubernetes names and labels of an assignment's objects.

export const MANAGED_BY = "gitea-edge-dispatcher";
export const LABEL_MANAGED = "app.kubernetes.io/managed-by";
export const LABEL_ASSIGNMENT = "gitea-edge-dispatcher/assignment";
export const ANNOTATION_ASSIGNMENT = "gitea-edge-dispatcher/assignment-id";
/** The runner pool of a workload (RUNNER_POOLS; a pool's name is a DNS label, so a valid value). */
export const LABEL_POOL = "gitea-edge-dispatcher/pool";

/** Kubernetes' DNS-1123 label: what Pod, Secret and VMI names must be (a VMI name is a hostname). */
export const DNS_1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
/** Kubernetes' label value rule (at most 63 characters). */
export const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const MAX_LABEL = 63;
const HASH_HEX = 16;

/** The names of one assignment's objects: `name` for the Pod or VMI and its Secret, `label` for selectors. */
export interface ObjectNames {
  name: string;
  label: string;
}

/**
 * `<prefix>-<tail>`, a DNS-1123 label, distinct for distinct ids. The tail is the id itself when
 * that is already a lowercase DNS label without "--" (the usual `gitea-1187-1`); any other id gets
 * `<readable part>--<hash of the exact id>`, and "--" is what keeps the two forms apart. The tail
 * is also the assignment label's value (a DNS label is a valid label value). The exact id is in
 * an annotation.
 */
export async function objectNames(prefix: string, assignmentId: string): Promise<ObjectNames> {
  const plain = `${prefix}-${assignmentId}`;
  if (plain.length <= MAX_LABEL && DNS_1123_LABEL.test(plain) && !assignmentId.includes("--")) return { name: plain, label: assignmentId };
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(assignmentId)));
  const hash = Array.from(digest.slice(0, HASH_HEX / 2), (b) => b.toString(16).padStart(2, "0")).join("");
  const room = MAX_LABEL - prefix.length - 1 - 2 - HASH_HEX;
  const readable = assignmentId
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .slice(0, Math.max(0, room))
    .replace(/^-+|-+$/g, "");
  const tail = `${readable || "x"}--${hash}`;
  return { name: `${prefix}-${tail}`, label: tail };
}

export function ownedMetadata(names: ObjectNames, assignmentId: string, pool?: string) {
  return {
    name: names.name,
    labels: { [LABEL_MANAGED]: MANAGED_BY, [LABEL_ASSIGNMENT]: names.label, ...(pool ? { [LABEL_POOL]: pool } : {}) },
    annotations: { [ANNOTATION_ASSIGNMENT]: assignmentId },
  };
}
