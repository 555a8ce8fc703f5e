import { env, exports } from "cloudflare:workers";
import { it, expect } from "vitest";
it("connects", async () => {
  const res = await exports.default.fetch("http://x/");
  const body = await res.json();
  expect(body).toHaveProperty("api");
});
