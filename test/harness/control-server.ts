// A tiny HTTP control API for test processes that workerd cannot reach otherwise (kill a server,
// start it again). `route` answers a method and path with a JSON body, or undefined for 404.
import { createServer } from "node:http";

export async function startControlServer(route: (method: string, url: string) => Promise<unknown>) {
  // Every error is answered (500), so the handler's promise is left to itself.
  const server = createServer((req, res) => {
    void route(req.method ?? "GET", req.url ?? "/").then(
      (body) => (body === undefined ? res.writeHead(404).end() : res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(body))),
      (err: unknown) => res.writeHead(500, { "content-type": "text/plain" }).end(String(err)),
    );
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return { url: `http://127.0.0.1:${port}`, close: () => new Promise((r) => server.close(r)) };
}
