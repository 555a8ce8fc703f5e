// Every request the Worker sent the fake Forgejo, checked against Forgejo 15's own API description
// (forgejo-v15.json): an operation of it, with its query parameters, and a body its definition
// admits (no unknown field, every type right). `GET /version` is Forgejo's too, but the trimmed
// file keeps only the Actions operations: it is checked against Gitea's description, which
// Forgejo's descends from. Requests of runners (the runner protocol) are not the Worker's.
import forgejo from "../fixtures/upstream-schemas/forgejo-v15.json";
import gitea from "../fixtures/upstream-schemas/gitea-v1.25.json";

type Op = { parameters?: { in: string; name: string; schema?: { $ref?: string } }[] };
type Doc = { paths: Record<string, Record<string, Op>>; definitions?: Record<string, { properties?: Record<string, { type?: string }> }> };

function operation(doc: Doc, method: string, path: string): Op | undefined {
  for (const [template, ops] of Object.entries(doc.paths)) {
    if (new RegExp(`^${template.replace(/\{[^}]+\}/g, "[^/]+")}$`).test(path)) return ops[method.toLowerCase()];
  }
  return undefined;
}

const jsonType = (v: unknown) =>
  Array.isArray(v) ? "array" : v === null ? "null" : typeof v === "number" ? (Number.isInteger(v) ? "integer" : "number") : typeof v;

export function checkForgejoRequests(requests: { method: string; path: string; search: string; headers: Record<string, string>; body: string }[]): string[] {
  const problems: string[] = [];
  for (const r of requests) {
    if (r.headers["x-runner-uuid"] !== undefined) continue;
    const what = `${r.method} ${r.path}${r.search}`;
    if (!r.path.startsWith("/api/v1/")) {
      problems.push(`${what}: not under /api/v1`);
      continue;
    }
    const path = r.path.slice("/api/v1".length);
    const op = path === "/version" ? operation(gitea as unknown as Doc, r.method, path) : operation(forgejo as unknown as Doc, r.method, path);
    if (!op) {
      problems.push(`${what}: no such operation in Forgejo 15`);
      continue;
    }
    const query = new Set((op.parameters ?? []).filter((p) => p.in === "query").map((p) => p.name));
    for (const name of new URLSearchParams(r.search).keys()) if (!query.has(name)) problems.push(`${what}: query parameter ${name} is not the operation's`);
    if (!/^token \S+$/.test(r.headers.authorization ?? "")) problems.push(`${what}: no Authorization: token …`);
    const bodyRef = (op.parameters ?? []).find((p) => p.in === "body")?.schema?.$ref;
    if (!r.body) continue;
    if (!bodyRef) {
      problems.push(`${what}: a body the operation does not take`);
      continue;
    }
    const props = (forgejo as unknown as Doc).definitions?.[bodyRef.split("/").pop()!]?.properties ?? {};
    for (const [k, v] of Object.entries(JSON.parse(r.body) as Record<string, unknown>)) {
      const type = props[k]?.type;
      if (!type) problems.push(`${what}: field ${k} is not in ${bodyRef}`);
      else if (type !== jsonType(v) && !(type === "number" && jsonType(v) === "integer")) problems.push(`${what}: field ${k} is ${jsonType(v)}, not ${type}`);
    }
  }
  return problems;
}
