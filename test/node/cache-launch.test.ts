// What each runner is given of the Actions cache, where the Worker serves one: Gitea's
// cache.external_server, a capability of its own that names its assignment and incarnation (and
// ends in "/": the client concatenates); Forgejo's external_server naming it in the query and a
// cache.secret of its job's own; each in the runner's Secret (its files), started with its config;
// none of it without the cache. A Kubernetes Pod's spec never holds them.
import { describe, expect, it } from "vitest";
import { cacheKey, forgejoSecret, verifyCapability } from "../../src/cache/capability.ts";
import { runnerCache } from "../../src/app/cache-site.ts";
import { giteaLaunch } from "../../src/forge/gitea/launch.ts";
import { forgejoLaunch } from "../../src/forge/forgejo/launch.ts";
import type { Invocation } from "../../src/domain/context.ts";

const signingKey = "claim-signing-key-for-tests-0123456789";
const config = (forge: "gitea" | "forgejo") =>
  ({ claimSigningKey: signingKey, publicUrl: "https://dispatch.example.org", forge }) as unknown as Invocation["config"];
const holder = { assignment: "gitea-1187-1", incarnation: "lx0k2" };
const file = {
  WARNING: "x",
  id: 7,
  uuid: "u",
  name: "gdr-gitea-1187-1",
  token: "t",
  address: "https://gitea.example.org",
  labels: ["ubuntu-latest:docker://node:20"],
  ephemeral: true as const,
};
const input = { claimToken: "claim", completeUrl: "https://dispatch.example.org/v1/assignments/x/complete" };

describe("a runner's cache", () => {
  it("Gitea: a capability URL of its own, ending in /, that names its assignment and incarnation only", async () => {
    const cache = await runnerCache(config("gitea"), holder);
    expect(cache.secret).toBeUndefined();
    expect(cache.url).toMatch(/^https:\/\/dispatch\.example\.org\/cache\/[^/]+\/$/);
    const cap = cache.url.split("/")[4]!;
    expect(await verifyCapability(await cacheKey(signingKey), cap)).toEqual(holder);
    expect((await runnerCache(config("gitea"), { ...holder, incarnation: "lx0k3" })).url).not.toBe(cache.url);
  });

  it("Forgejo: the origin with the runner in the query (the proxy keeps it), and its job's own secret", async () => {
    const cache = await runnerCache(config("forgejo"), holder);
    expect(cache.url).toBe("https://dispatch.example.org/?gdr=gitea-1187-1~lx0k2");
    expect(cache.secret).toBe(await forgejoSecret(await cacheKey(signingKey), holder));
    expect((await runnerCache(config("forgejo"), { ...holder, assignment: "gitea-1188-1" })).secret).not.toBe(cache.secret);
  });

  it("the Gitea launch: config.yaml in the Secret, the daemon started with it, in the Pod and in cloud-init; nothing without the cache", async () => {
    const cache = await runnerCache(config("gitea"), holder);
    const launch = giteaLaunch(file, { ...input, cache });
    expect(JSON.parse(launch.files["config.yaml"]!)).toEqual({ cache: { enabled: true, external_server: cache.url } });
    expect(launch.command.join(" ")).toContain("daemon --config /etc/gitea-runner/config.yaml");
    expect(launch.command.join(" ")).not.toContain(cache.url);
    expect(launch.userData).toContain("/var/lib/gitea-runner/config.yaml");
    expect(launch.userData).toContain("daemon --config /var/lib/gitea-runner/config.yaml");
    const plain = giteaLaunch(file, input);
    expect(Object.keys(plain.files)).toEqual([".runner", "claim-token"]);
    expect(plain.command.join(" ")).not.toContain("--config");
  });

  it("the Forgejo launch: config.yml with external_server and secret in the Secret, one-job --config; nothing without the cache", async () => {
    const cache = await runnerCache(config("forgejo"), holder);
    const runner = { url: "https://forgejo.example.org", uuid: "u", token: "t", labels: ["docker"], handle: "h1" };
    const launch = forgejoLaunch(runner, { ...input, cache });
    expect(JSON.parse(launch.files["config.yml"]!)).toEqual({ cache: { enabled: true, external_server: cache.url, secret: cache.secret } });
    expect(launch.command).toEqual(expect.arrayContaining(["one-job", "--config", "/etc/forgejo-runner/config.yml"]));
    expect(launch.command.join(" ")).not.toContain(cache.secret!);
    expect(launch.userData).toContain("/var/lib/forgejo-runner/config.yml");
    expect(forgejoLaunch(runner, input).command).not.toContain("--config");
  });
});
