// Kubernetes names and labels of an assignment's objects.

export const MANAGED_BY = "gitea-edge-dispatcher";
export const LABEL_MANAGED = "app.kubernetes.io/managed-by";
export const LABEL_ASSIGNMENT = "gitea-edge-dispatcher/assignment";
export const ANNOTATION_ASSIGNMENT = "gitea-edge-dispatcher/assignment-id";

/** A DNS-1123 label (≤ 63) from the runner name; long or unusual ids get a stable hash suffix. */
export async function objectName(prefix: string, assignmentId: string): Promise<string> {
  const wanted = `${prefix}-${assignmentId}`;
  const clean = wanted.toLowerCase().replace(/[^a-z0-9-]+/g, "-").replace(/^-+|-+$/g, "");
  if (clean === wanted && clean.length <= 55) return clean;
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(assignmentId)));
  const hash = Array.from(digest.slice(0, 4), (b) => b.toString(16).padStart(2, "0")).join("");
  return `${clean.slice(0, 46).replace(/-+$/, "")}-${hash}`;
}

/** Label values hold ≤ 63 of [A-Za-z0-9._-]; the exact id also goes into an annotation. */
export function assignmentLabel(id: string): string {
  return id.length <= 63 ? id : id.slice(0, 63).replace(/[._-]+$/, "");
}

export function ownedMetadata(name: string, assignmentId: string) {
  return {
    name,
    labels: { [LABEL_MANAGED]: MANAGED_BY, [LABEL_ASSIGNMENT]: assignmentLabel(assignmentId) },
    annotations: { [ANNOTATION_ASSIGNMENT]: assignmentId },
  };
}
