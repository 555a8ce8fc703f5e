// Every response a workerd test gets through `request()` is checked against the OpenAPI document:
// its status must be listed for that route, and a JSON body must match the listed schema. So the
// document cannot drift from what the code answers.
import { Validator } from "@cfworker/json-schema";
import { openApiDocument } from "../../src/http/openapi.ts";

type Operation = { responses: Record<string, { content?: Record<string, { schema: object }> }> };
const doc = openApiDocument() as unknown as { paths: Record<string, Record<string, Operation>>; components: object };
const routes = Object.entries(doc.paths).map(([template, ops]) => ({
  re: new RegExp(`^${template.replace(/\{[^}]+\}/g, "[^/]+")}$`),
  ops,
}));

/** Throws when `res` (to `method path`) is not what the document says that route answers. */
export async function checkAgainstOpenApi(method: string, path: string, res: Response): Promise<void> {
  const route = routes.find((r) => r.re.test(path.split("?")[0]!));
  // Paths the API does not have (a test of the 404 for unknown paths) are not in the document.
  if (!route) return;
  const op = route.ops[method.toLowerCase()];
  if (!op) throw new Error(`OpenAPI: ${method} ${path} is not documented`);
  const response = op.responses[String(res.status)];
  if (!response) throw new Error(`OpenAPI: ${method} ${path} answered ${res.status}, which the document does not list`);
  const type = (res.headers.get("content-type") ?? "").split(";")[0]!.trim();
  const media = response.content?.[type];
  if (response.content && !media)
    throw new Error(`OpenAPI: ${method} ${path} ${res.status} answered ${type}, the document says ${Object.keys(response.content).join(", ")}`);
  if (type !== "application/json" || !media) return;
  const body = await res.clone().json();
  const result = new Validator({ ...media.schema, components: doc.components }, "2020-12", false).validate(body);
  if (!result.valid) throw new Error(`OpenAPI: ${method} ${path} ${res.status} body does not match: ${JSON.stringify(result.errors.slice(-3))}`);
}
