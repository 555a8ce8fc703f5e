// Claim tokens and the constant-time comparison, with the imported keys kept for the isolate's
// life: a key kept for one secret never signs or verifies for another. Near misses: a token one
// character off, a token of another key after that key was used, a secret pushed out of the kept
// keys and asked for again, a string that is a prefix of the other.
import { describe, expect, it } from "vitest";
import { claimToken, timingSafeEqual, verifyClaimToken } from "../../src/model/crypto.ts";

describe("claim tokens", () => {
  it("a token verifies under its key, for its id, and names its incarnation", async () => {
    const token = await claimToken("key-a", "job-1", "inc1");
    expect(await verifyClaimToken("key-a", "job-1", token)).toBe("inc1");
    expect(await verifyClaimToken("key-a", "job-2", token)).toBeUndefined();
  });

  it("near miss: the token one character off is refused", async () => {
    const token = await claimToken("key-a", "job-1", "inc1");
    const last = token.at(-1) === "A" ? "B" : "A";
    expect(await verifyClaimToken("key-a", "job-1", token.slice(0, -1) + last)).toBeUndefined();
  });

  it("near miss: a key kept for one secret neither signs nor verifies for another", async () => {
    const a = await claimToken("key-a", "job-1", "inc1");
    const b = await claimToken("key-b", "job-1", "inc1");
    expect(b).not.toBe(a);
    expect(await verifyClaimToken("key-b", "job-1", a)).toBeUndefined();
    expect(await verifyClaimToken("key-a", "job-1", b)).toBeUndefined();
    expect(await verifyClaimToken("key-b", "job-1", b)).toBe("inc1");
  });

  it("a secret pushed out of the kept keys signs the same token when asked for again", async () => {
    const first = await claimToken("key-0", "job-1", "inc1");
    const later: string[] = [];
    for (let i = 1; i <= 20; i++) later.push(await claimToken(`key-${i}`, "job-1", "inc1"));
    // Each secret its own key, past the number kept as before it.
    expect(new Set([first, ...later]).size).toBe(21);
    expect(await verifyClaimToken("key-20", "job-1", later.at(-1)!)).toBe("inc1");
    expect(await verifyClaimToken("key-0", "job-1", later.at(-1)!)).toBeUndefined();
    expect(await claimToken("key-0", "job-1", "inc1")).toBe(first);
    expect(await verifyClaimToken("key-0", "job-1", first)).toBe("inc1");
  });
});

describe("timingSafeEqual", () => {
  it("is true for equal strings, false for others, a prefix among them", async () => {
    expect(await timingSafeEqual("secret-token", "secret-token")).toBe(true);
    expect(await timingSafeEqual("secret-token", "secret-tokeN")).toBe(false);
    expect(await timingSafeEqual("secret-token", "secret-token-and-more")).toBe(false);
    expect(await timingSafeEqual("", "")).toBe(true);
  });
});
