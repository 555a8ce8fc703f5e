// A Kubernetes API server that follows the real contract for what the drivers use: core/v1 Pods
// and Secrets, kubevirt.io/v1 VirtualMachineInstances. 201 with the object, 409 and 404 as `Status`
// (reasons AlreadyExists, NotFound), 401 without the bearer token. Tests share one server, each
// under a path prefix of its own (as behind an API proxy). Control endpoints: /<prefix>/_control.
import { startTenantServer } from "./fake-http.mjs";
import { randomUUID } from "node:crypto";

export const FAKE_K8S_TOKEN = "k8s-token-0000";
const RESOURCE = /^\/(?:api\/v1|apis\/kubevirt\.io\/v1)\/namespaces\/([^/]+)\/(pods|secrets|virtualmachineinstances)(?:\/([^/]+))?$/;
const KINDS = { pods: "Pod", secrets: "Secret", virtualmachineinstances: "VirtualMachineInstance" };

// apimachinery's IsDNS1123Subdomain (Pod and Secret names), IsDNS1123Label (a VMI's name is its
// hostname) and IsValidLabelValue, with the messages the real API server answers 422 with.
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const QUALIFIED_NAME = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;

/** Field errors of an object's name and labels, as the real validation reports them. */
function invalidFields(resource, obj) {
  const causes = [];
  const name = obj.metadata.name;
  const label = resource === "virtualmachineinstances";
  if (typeof name !== "string" || (label ? !(name.length <= 63 && DNS_LABEL.test(name)) : !(name.length <= 253 && DNS_SUBDOMAIN.test(name)))) {
    const rule = label
      ? "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
      : "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
    causes.push({ reason: "FieldValueInvalid", message: `Invalid value: ${JSON.stringify(name)}: ${rule}`, field: "metadata.name" });
  }
  for (const [key, value] of Object.entries(obj.metadata.labels ?? {})) {
    if (!(key.length <= 317 && QUALIFIED_NAME.test(key)))
      causes.push({
        reason: "FieldValueInvalid",
        message: `Invalid value: ${JSON.stringify(key)}: name part must consist of alphanumeric characters, '-', '_' or '.'`,
        field: "metadata.labels",
      });
    if (typeof value !== "string" || !(value.length <= 63 && LABEL_VALUE.test(value))) {
      causes.push({
        reason: "FieldValueInvalid",
        message: `Invalid value: ${JSON.stringify(value)}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`,
        field: `metadata.labels`,
      });
    }
  }
  return causes;
}

const status = (code, reason, message, details) => ({
  kind: "Status",
  apiVersion: "v1",
  metadata: {},
  status: "Failure",
  message,
  reason,
  ...(details ? { details } : {}),
  code,
});

const newCluster = () => ({
  objects: new Map(),
  requests: [],
  created: { pods: 0, secrets: 0, virtualmachineinstances: 0 },
  mode: { token: FAKE_K8S_TOKEN, runAfterGets: -1, hangFirst: 0, hangMs: 5_000, failFirst: 0 },
  calls: 0,
});

export function startFakeKubernetes() {
  return startTenantServer(newCluster, serve);
  async function serve({ req, text, path, tenant: c, send }) {
    if (path.startsWith("/_control/")) return control(c, path.slice(10), req.method, text, send);
    c.requests.push({ method: req.method, path, headers: req.headers, body: text });
    if (req.headers.authorization !== `Bearer ${c.mode.token}`) return send(401, status(401, "Unauthorized", "Unauthorized"));
    const call = ++c.calls;
    if (call <= c.mode.hangFirst) {
      await new Promise((r) => setTimeout(r, c.mode.hangMs));
      return send(504, status(504, "Timeout", "hung"));
    }
    if (call <= c.mode.hangFirst + c.mode.failFirst)
      return send(503, status(503, "ServiceUnavailable", "the server is currently unable to handle the request"));
    const m = RESOURCE.exec(path);
    if (!m) return send(404, status(404, "NotFound", "the server could not find the requested resource"));
    const [, ns, resource, name] = m;
    const key = (n) => `${resource}/${ns}/${n}`;
    if (req.method === "POST" && !name) {
      let obj;
      try {
        obj = JSON.parse(text);
      } catch {
        return send(400, status(400, "BadRequest", "invalid JSON"));
      }
      const objName = obj?.metadata?.name;
      if (!objName) return send(422, status(422, "Invalid", `${KINDS[resource]} is invalid: metadata.name: Required value`));
      const causes = invalidFields(resource, obj);
      if (causes.length) {
        const message = `${KINDS[resource]} ${JSON.stringify(String(objName))} is invalid: ${causes.map((c) => `${c.field}: ${c.message}`).join(", ")}`;
        return send(422, status(422, "Invalid", message, { name: objName, kind: KINDS[resource], causes }));
      }
      if (c.objects.has(key(objName)))
        return send(409, status(409, "AlreadyExists", `${resource} "${objName}" already exists`, { name: objName, kind: resource }));
      const stored = {
        ...obj,
        metadata: { ...obj.metadata, namespace: ns, uid: randomUUID(), resourceVersion: "1", creationTimestamp: new Date().toISOString() },
        ...(resource === "secrets" ? {} : { status: { phase: "Pending" } }),
        gets: 0,
      };
      c.objects.set(key(objName), stored);
      c.created[resource]++;
      return send(201, view(stored));
    }
    if (!name) return send(405, status(405, "MethodNotAllowed", "method not allowed"));
    const existing = c.objects.get(key(name));
    const notFound = () => send(404, status(404, "NotFound", `${resource} "${name}" not found`, { name, kind: resource }));
    if (req.method === "GET") {
      if (!existing) return notFound();
      existing.gets++;
      if (c.mode.runAfterGets >= 0 && existing.status?.phase === "Pending" && existing.gets > c.mode.runAfterGets) existing.status.phase = "Running";
      return send(200, view(existing));
    }
    if (req.method === "PUT") {
      if (!existing) return notFound();
      const obj = JSON.parse(text);
      c.objects.set(key(name), {
        ...obj,
        metadata: { ...existing.metadata, ...obj.metadata, resourceVersion: String(Number(existing.metadata.resourceVersion) + 1) },
        gets: 0,
      });
      return send(200, view(c.objects.get(key(name))));
    }
    if (req.method === "DELETE") {
      if (!existing) return notFound();
      c.objects.delete(key(name));
      return send(
        200,
        resource === "secrets" ? { kind: "Status", apiVersion: "v1", metadata: {}, status: "Success", details: { name, kind: resource } } : view(existing),
      );
    }
    return send(405, status(405, "MethodNotAllowed", "method not allowed"));
  }
  function view(obj) {
    const { gets: _g, ...rest } = obj;
    return rest;
  }
  function control(c, what, method, text, send) {
    if (what === "mode" && method === "POST") {
      c.mode = { ...c.mode, ...JSON.parse(text || "{}") };
      c.calls = 0;
      return send(200, c.mode);
    }
    if (what === "phase" && method === "POST") {
      const { resource, name, phase } = JSON.parse(text);
      const obj = [...c.objects.entries()].find(([k]) => k.startsWith(`${resource}/`) && k.endsWith(`/${name}`))?.[1];
      if (!obj) return send(404, { error: "no such object" });
      obj.status = { ...obj.status, phase };
      return send(200, view(obj));
    }
    if (what === "state") return send(200, { objects: [...c.objects.values()].map(view), created: c.created, requests: c.requests });
    return send(404, { error: "unknown control" });
  }
}
