// The HTTP plumbing of the fakes: a server on a free loopback port whose first path segment names
// a tenant, so that parallel tests each get an isolated fake behind one server.
import { createServer } from "node:http";

/**
 * `handle({ req, res, text, url, path, tenant, send })` serves one request; `path` is the URL path
 * without the tenant segment, `text` the whole body.
 */
export async function startTenantServer(newTenant, handle, { contentType = "application/json" } = {}) {
  const tenants = new Map();
  const server = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const text = Buffer.concat(chunks).toString("utf8");
    const url = new URL(req.url, "http://x");
    const [, name, ...rest] = url.pathname.split("/");
    if (!tenants.has(name)) tenants.set(name, newTenant());
    const send = (status, body) => {
      res.writeHead(status, { "content-type": contentType });
      res.end(body === undefined ? "" : JSON.stringify(body));
    };
    return handle({ req, res, text, url, path: `/${rest.join("/")}`, tenant: tenants.get(name), send });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections?.();
        server.close(() => r());
      }),
  };
}

/**
 * The preamble of every runner.v1 Connect RPC, as Gitea and Forgejo share it: the runner named by
 * `x-runner-uuid` with its `x-runner-token`, and the parsed message. Answers 401 or 400 itself and
 * returns undefined when either is wrong; a known runner is marked online.
 */
export function authenticatedRunner(runners, req, text, send) {
  const runner = [...runners.values()].find((r) => r.uuid === req.headers["x-runner-uuid"]);
  if (!runner || runner.token !== req.headers["x-runner-token"]) return void send(401, { code: "unauthenticated", message: "unregistered runner" });
  let msg;
  try {
    msg = JSON.parse(text || "{}");
  } catch {
    return void send(400, { code: "invalid_argument", message: "invalid JSON" });
  }
  runner.lastOnline = Date.now();
  return { runner, msg };
}
