// GET /openapi.json: OpenAPI 3.1, generated from the zod schemas the handlers parse with and the
// answer schemas (api-schemas.ts). Each route lists the errors its handler and the domain can give.
import { OpenAPIRegistry, OpenApiGeneratorV31 } from "@asteasolutions/zod-to-openapi";
import { z } from "zod";
import { interruptBody } from "../domain/interrupt.ts";
import { assignmentRequestSchema, assignmentIdSchema } from "../model/assignment.ts";
import { workflowJobPayload } from "../forge/gitea/webhook.ts";
import { actionRunPayload } from "../forge/forgejo/webhook.ts";
import { registerCachePaths } from "./openapi-cache.ts";
import { assignmentView, errorBody, forgejoWebhookBody, healthBody, publishedBody, statusBody, usageBody, webhookBody } from "./api-schemas.ts";

const json = (schema: z.ZodType, description: string) => ({ description, content: { "application/json": { schema } } });
const error = (description: string) => json(errorBody, description);
const ERRORS = {
  400: error("InvalidInput: the body or a parameter breaks a rule; `fields` names what is wrong."),
  401: error("Missing or wrong credentials."),
  403: error("Refused: the claim token belongs to another assignment, or the runner is not the one registered."),
  404: error("NotFound: no such assignment (or the endpoint is not configured)."),
  409: error("Conflict: other content under the same id, or a state that does not allow it."),
  413: error("Body too large."),
  415: error("Body is not application/json."),
  500: error("The dispatcher is misconfigured (see /healthz)."),
  503: error("Unavailable: NATS (or Gitea) did not answer or confirm; nothing changed, retrying is safe."),
} as const;
const pick = <K extends keyof typeof ERRORS>(...codes: K[]) => Object.fromEntries(codes.map((c) => [c, ERRORS[c]])) as Pick<typeof ERRORS, K>;
const idParam = z.object({ id: assignmentIdSchema });

function build() {
  const r = new OpenAPIRegistry();
  const dispatch = r.registerComponent("securitySchemes", "dispatchToken", {
    type: "http",
    scheme: "bearer",
    description: "DISPATCH_TOKEN: the operator API.",
  });
  const claim = r.registerComponent("securitySchemes", "claimToken", {
    type: "http",
    scheme: "bearer",
    description:
      "The claim token of one incarnation of the assignment (its record's creation): '<incarnation>.' + base64url(HMAC-SHA256(CLAIM_SIGNING_KEY, 'claim:' + id + ':' + incarnation)), handed to its runner. A token of an earlier record under the same id is refused (403).",
  });
  const signature = r.registerComponent("securitySchemes", "giteaSignature", {
    type: "apiKey",
    in: "header",
    name: "X-Gitea-Signature",
    description: "HMAC-SHA256 of the raw body with GITEA_WEBHOOK_SECRET, hex (or X-Hub-Signature-256: sha256=<hex>).",
  });
  const forgejoSignature = r.registerComponent("securitySchemes", "forgejoSignature", {
    type: "apiKey",
    in: "header",
    name: "X-Forgejo-Signature",
    description: "HMAC-SHA256 of the raw body with GITEA_WEBHOOK_SECRET, hex (or X-Hub-Signature-256: sha256=<hex>).",
  });
  const bootstrap = r.registerComponent("securitySchemes", "bootstrapToken", {
    type: "http",
    scheme: "bearer",
    description: "The one-time token in a VM's user_data (the hetzner driver): spent by its first use.",
  });
  const metrics = r.registerComponent("securitySchemes", "metricsToken", { type: "http", scheme: "bearer", description: "METRICS_TOKEN." });
  const status = r.registerComponent("securitySchemes", "statusPassword", {
    type: "http",
    scheme: "basic",
    description: "Any user name, STATUS_TOKEN as the password.",
  });
  const sec = (s: { name: string }) => [{ [s.name]: [] }];

  r.registerPath({
    method: "get",
    path: "/healthz",
    summary: "Health: NATS, the JetStream layout, replicas",
    description: "Anyone may ask; with the dispatch token also the stream's and consumers' counts.",
    security: [{}, ...sec(dispatch)],
    responses: { 200: json(healthBody, "Healthy."), 401: ERRORS[401], 503: json(healthBody, "Unhealthy: `problems` says what and how to fix it.") },
  });
  r.registerPath({
    method: "post",
    path: "/v1/assignments",
    summary: "Queue an assignment",
    security: sec(dispatch),
    request: { body: { required: true, content: { "application/json": { schema: assignmentRequestSchema } } } },
    responses: { 202: json(publishedBody, "Queued (or already queued: `duplicate`)."), ...pick(400, 401, 409, 413, 415, 500, 503) },
  });
  r.registerPath({
    method: "get",
    path: "/v1/assignments/{id}",
    summary: "An assignment's state",
    security: sec(dispatch),
    request: { params: idParam },
    responses: { 200: json(assignmentView, "The assignment."), ...pick(401, 404, 500, 503) },
  });
  for (const [verb, summary] of [
    ["claim", "The runner took the assignment"],
    ["complete", "The runner finished; its slot is released and the runner torn down"],
  ] as const) {
    r.registerPath({
      method: "post",
      path: `/v1/assignments/{id}/${verb}`,
      summary,
      security: sec(claim),
      request: { params: idParam },
      responses: { 200: json(assignmentView, "Done (idempotent)."), ...pick(401, 403, 404, 409, 500, 503) },
    });
  }
  r.registerPath({
    method: "get",
    path: "/v1/assignments/{id}/handle",
    summary: "The job a Forgejo warm runner runs (FORGE=forgejo)",
    security: sec(claim),
    request: { params: idParam },
    description: "Asked by a warm runner with its own claim token until it has an answer: the handle for `forgejo-runner one-job --handle`.",
    responses: {
      200: { description: "The job attempt's handle.", content: { "text/plain": { schema: z.string() } } },
      204: { description: "No job given to it yet: ask again." },
      ...pick(401, 403, 404, 409, 500, 503),
    },
  });
  r.registerPath({
    method: "post",
    path: "/v1/assignments/{id}/interrupt",
    summary: "The runner's machine is being taken back (a Spot interruption)",
    security: sec(claim),
    request: { params: idParam, body: { required: true, content: { "application/json": { schema: interruptBody } } } },
    description:
      "POSTed by the watcher beside the runner with its claim token and EC2's spot/instance-action document. Before the claim (`replaced`) a new runner is asked for under a new claim token, and the old token is refused from then on; after it (`lost`) the assignment ends and its job is listed for a rerun once its run has finished. A repeat of the same report answers `over`. Taken only where the backend's driver replaces a runner on it (`ec2`): elsewhere 409, naming the backend and its driver.",
    responses: {
      200: json(assignmentView.extend({ outcome: z.enum(["replaced", "lost", "over"]) }), "Handled (idempotent)."),
      ...pick(400, 401, 403, 404, 409, 500, 503),
    },
  });
  r.registerPath({
    method: "post",
    path: "/v1/assignments/{id}/bootstrap",
    summary: "A VM's launch, once (the hetzner driver)",
    security: sec(bootstrap),
    request: { params: idParam },
    description:
      "Asked by a server at its first boot with the one-time token of its user_data: the shell script that writes its runner's identity and claim token (0600) and starts the runner. The token is spent by the answer: a second ask, an expired token or another assignment's is a 404.",
    responses: {
      200: { description: "The launch script.", content: { "text/x-shellscript": { schema: z.string() } } },
      ...pick(400, 401, 404, 500, 503),
    },
  });
  r.registerPath({
    method: "post",
    path: "/v1/gitea/webhook",
    summary: "Gitea's workflow_job deliveries",
    security: sec(signature),
    request: { body: { required: true, content: { "application/json": { schema: workflowJobPayload } } } },
    responses: {
      200: json(webhookBody, "Handled, or ignored with the reason."),
      202: json(webhookBody, "Queued, or ignored with the reason."),
      ...pick(400, 401, 404, 413, 415, 500, 503),
    },
  });
  r.registerPath({
    method: "post",
    path: "/v1/forgejo/webhook",
    summary: "Forgejo's action_run_* deliveries (FORGE=forgejo)",
    security: sec(forgejoSignature),
    description:
      "A run ended: the poller looks at the waiting list now, and the run's jobs that left it end there with their runners. Other events are ignored (202).",
    request: { body: { required: true, content: { "application/json": { schema: actionRunPayload } } } },
    responses: { 202: json(forgejoWebhookBody, "The poller looks now, or ignored with the reason."), ...pick(400, 401, 404, 413, 415, 500, 503) },
  });
  r.registerPath({
    method: "get",
    path: "/metrics",
    summary: "Prometheus text exposition",
    security: sec(metrics),
    responses: { 200: { description: "Metrics (text/plain; version=0.0.4).", content: { "text/plain": { schema: z.string() } } }, ...pick(401, 404, 500, 503) },
  });
  r.registerPath({
    method: "get",
    path: "/status",
    summary: "The status page (HTML)",
    security: sec(status),
    responses: {
      200: { description: "The page.", content: { "text/html": { schema: z.string() } } },
      401: { description: "Asks for the password (WWW-Authenticate: Basic).", content: { "text/plain": { schema: z.string() } } },
      ...pick(404, 500, 503),
    },
  });
  r.registerPath({
    method: "get",
    path: "/v1/status",
    summary: "The status page's data",
    security: sec(dispatch),
    responses: { 200: json(statusBody, "Per backend, the most recent assignments, health problems."), ...pick(401, 500, 503) },
  });
  r.registerPath({
    method: "get",
    path: "/v1/usage",
    summary: "Runner use per owner and repository over a window",
    security: sec(dispatch),
    description:
      "From the durable records (kept 7 days): jobs queued in [since, until), their runner seconds and their time from queued to running. `until` defaults to now, `since` to a day before `until`.",
    request: {
      query: z.object({ since: z.string().optional().meta({ description: "RFC 3339" }), until: z.string().optional().meta({ description: "RFC 3339" }) }),
    },
    responses: { 200: json(usageBody, "Per owner, busiest first, and per repository."), ...pick(400, 401, 500, 503) },
  });
  r.registerPath({
    method: "get",
    path: "/openapi.json",
    summary: "This document",
    responses: { 200: { description: "OpenAPI 3.1.", content: { "application/json": { schema: z.object({}).loose() } } } },
  });

  registerCachePaths(r);

  return new OpenApiGeneratorV31(r.definitions).generateDocument({
    openapi: "3.1.0",
    info: {
      title: "gitea-edge-dispatcher",
      version: "1",
      description: "Turns Gitea Actions jobs into assignments in NATS JetStream and reconciles each with a runner backend.",
    },
  });
}

let document: ReturnType<typeof build> | undefined;
export function openApiDocument() {
  return (document ??= build());
}
