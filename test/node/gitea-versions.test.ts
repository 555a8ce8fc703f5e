// What each Gitea release sends about attempts (src/forge/gitea/versions.ts), as a table over every
// release, delivery and listed status, and which release a deployment is served as (release.ts):
// pinned, read once and kept, the last one kept when Gitea cannot be asked, the newest when never read.
import { describe, expect, it } from "vitest";
import { executionOf, releaseOf } from "../../src/forge/gitea/versions.ts";
import { forgetReleases, giteaRelease, RELEASE_TTL_MS } from "../../src/forge/gitea/release.ts";

describe("releaseOf", () => {
  it.each([
    ["1.24.7", "at-pickup", "none", false],
    ["1.25.0", "at-pickup", "none", false],
    ["v1.25.5", "at-pickup", "none", false],
    ["1.26.2", "at-pickup", "same-job", false],
    ["1.26.0-rc0", "at-pickup", "same-job", false],
    ["1.26.0+dev-512-gaedf4e84", "at-pickup", "same-job", false],
    ["1.27.0", "per-run", "new-job", false],
    ["1.27.1+backport", "per-run", "new-job", false],
    ["1.28.0", "per-run", "new-job", true],
    ["2.0.0", "per-run", "new-job", true],
    ["1.23.8", "at-pickup", "none", true],
    ["development", "per-run", "new-job", true],
    ["1.2", "at-pickup", "none", true],
    ["", "per-run", "new-job", true],
  ] as const)("%s: numbered %s, reruns %s, unknown %s", (version, numbering, reruns, unknown) => {
    const r = releaseOf(version);
    expect([r.numbering, r.reruns, r.unknown !== undefined]).toEqual([numbering, reruns, unknown]);
  });
  it("names a release it serves as another", () => {
    expect(releaseOf("1.28.0").unknown).toBe("Gitea 1.28.0 is newer than 1.27: served as 1.27");
    expect(releaseOf("1.127.0").unknown).toContain("newer than 1.27");
  });
});

describe("executionOf", () => {
  // [raw run_attempt, action, runner_id] → execution, for the release that numbers at pickup and per run.
  it.each([
    // 1.24–1.26: a first run.
    [0, "queued", undefined, 1, 1],
    [0, "waiting", undefined, 1, 1],
    [1, "in_progress", 57, 1, 1],
    [1, "completed", 57, 1, 1],
    // Cancelled before pickup: no runner, the count it was queued with.
    [0, "completed", undefined, 1, 1],
    [0, "completed", 0, 1, 1],
    // A rerun of the same row (1.26): queued with the count before, in_progress one more.
    [1, "queued", undefined, 2, 1],
    [2, "in_progress", 58, 2, 2],
    [2, "completed", 58, 2, 2],
    [1, "completed", null, 2, 1],
    // 1.27: the run's attempt on every delivery; 0 is a job inserted before 1.27.
    [2, "queued", undefined, 3, 2],
    [3, "in_progress", 9, 3, 3],
  ] as const)("run_attempt %i, %s, runner %s: at pickup %i, per run %i", (raw, action, runner, atPickup, perRun) => {
    const job = { run_attempt: raw, runner_id: runner };
    expect([executionOf("at-pickup", job, action), executionOf("per-run", job, action)]).toEqual([atPickup, perRun]);
  });
  it("reads a listed job's status where no action is given, and counts a missing attempt as 0", () => {
    expect(executionOf("at-pickup", { run_attempt: 0, status: "queued" })).toBe(1);
    expect(executionOf("at-pickup", { run_attempt: 1, status: "in_progress" })).toBe(1);
    expect(executionOf("at-pickup", { status: "queued" })).toBe(1);
    expect(executionOf("per-run", {})).toBe(1);
    expect(executionOf("at-pickup", { run_attempt: -3, status: "queued" })).toBe(1);
  });
});

describe("giteaRelease", () => {
  const scene = (url: string, version?: string) => {
    const events: { event: string; reason?: string }[] = [];
    let now = 1_000_000;
    const d = {
      now: () => now,
      sink: { event: (e: { event: string; reason?: string }) => events.push(e), error: () => undefined, summary: () => undefined },
      config: { gitea: { url, version } },
    };
    const asked: string[] = [];
    const answers: (string | Error)[] = [];
    const client = {
      version: async () => {
        const a = answers.shift() ?? "1.27.0";
        asked.push(String(a));
        if (a instanceof Error) throw a;
        return a;
      },
    };
    return { d, client, events, asked, answers, later: (ms: number) => void (now += ms) };
  };

  it("GITEA_VERSION pins it: Gitea is not asked", async () => {
    const s = scene("http://pinned", "1.26.2");
    expect((await giteaRelease(s.d, s.client)).numbering).toBe("at-pickup");
    expect(s.asked).toEqual([]);
  });

  it("reads it once and keeps it for RELEASE_TTL_MS, then reads it again", async () => {
    forgetReleases();
    const s = scene("http://kept");
    s.answers.push("1.26.2", "1.27.0");
    expect((await giteaRelease(s.d, s.client)).version).toBe("1.26.2");
    s.later(RELEASE_TTL_MS - 1);
    expect((await giteaRelease(s.d, s.client)).version).toBe("1.26.2");
    s.later(1);
    expect((await giteaRelease(s.d, s.client)).version).toBe("1.27.0");
    expect(s.asked).toHaveLength(2);
  });

  it("keeps the last release read while Gitea cannot be asked, and asks again a minute later", async () => {
    forgetReleases();
    const s = scene("http://flaky");
    s.answers.push("1.26.2", new Error("timed out"), "1.26.2");
    await giteaRelease(s.d, s.client);
    s.later(RELEASE_TTL_MS);
    expect((await giteaRelease(s.d, s.client)).numbering).toBe("at-pickup");
    s.later(59_999);
    await giteaRelease(s.d, s.client);
    s.later(1);
    await giteaRelease(s.d, s.client);
    expect([s.asked.length, s.events]).toEqual([3, []]);
  });

  it("serves a release never read as the newest known, and says so once", async () => {
    forgetReleases();
    const s = scene("http://down");
    s.answers.push(new Error("refused"), new Error("refused"));
    expect(await giteaRelease(s.d, s.client)).toMatchObject({ numbering: "per-run", unknown: expect.stringContaining("could not be read") });
    s.later(60_000);
    await giteaRelease(s.d, s.client);
    expect(s.events.map((e) => e.event)).toEqual(["gitea_version_unknown"]);
    // The message of the failure is Gitea's client's, never a body or a token.
    expect(s.events[0]!.reason).toBe("Gitea's version could not be read (refused): served as 1.27");
  });

  it("keeps each Gitea's release apart", async () => {
    forgetReleases();
    const a = scene("http://a");
    const b = scene("http://b");
    a.answers.push("1.26.2");
    b.answers.push("1.27.0");
    expect([(await giteaRelease(a.d, a.client)).version, (await giteaRelease(b.d, b.client)).version]).toEqual(["1.26.2", "1.27.0"]);
  });
});
