import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

// workerd reports a WebSocket or fetch that failed to connect or lost its peer (a refused port, a
// node or fake the fault suites killed) as an "uncaught" error from inside the runtime, with its native stack,
// although nats.js caught the failure and the test saw it as a ConnectionError. workerd logs it
// itself; it is never raised in JS (an unhandledrejection listener does not see it), and the
// Workers plugin prints every runtime line it does not already ignore. Each such failure is
// caused, and expected, by the test that makes it, so these lines (in workerd's own formats, never
// a reporter's) are dropped here; every other line passes.
const EXPECTED_DISCONNECT = [
  /^uncaught exception; (source = Uncaught \(in promise\); stack = Error|exception = workerd\/jsg\/value\.h:\d+: disconnected: jsg\.Error): Network connection lost\./,
  /^exception = rust\/[\w/-]+\/ffi\.rs:\d+: disconnected: (Connection refused \(os error 111\)|Broken pipe \(os error 32\)|Connection reset by peer \(os error 104\)|client error \((SendRequest|Canceled)\))$/,
  /^stack: (\S*\/workerd@[0-9a-f]+ ?)+$/,
  // The gateway suite resets its Durable Object on purpose (state.abort("test: reset")).
  /^uncaught exception; exception = workerd\/api\/actor-state\.c\+\+:\d+: failed: broken\.outputGateBroken; jsg\.Error: test: reset$/,
];
for (const stream of [process.stdout, process.stderr]) {
  const write = stream.write.bind(stream) as (...args: unknown[]) => boolean;
  stream.write = (chunk: unknown, ...rest: unknown[]) => {
    const first = typeof chunk === "string" ? chunk.split("\n", 1)[0]! : "";
    return EXPECTED_DISCONNECT.some((re) => re.test(first)) ? true : write(chunk, ...rest);
  };
}

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: "node",
          include: ["test/node/**/*.test.ts"],
          globalSetup: ["test/harness/global-setup.ts"],
          testTimeout: 30_000,
          hookTimeout: 30_000,
        },
      },
      {
        plugins: [
          cloudflareTest(({ inject }) => ({
            wrangler: { configPath: "./wrangler.jsonc" },
            miniflare: { bindings: { NATS_URL: inject("natsWsUrl") } },
          })),
        ],
        test: {
          name: "workerd",
          include: ["test/workerd/**/*.test.ts"],
          globalSetup: ["test/harness/global-setup.ts"],
          testTimeout: 30_000,
          hookTimeout: 30_000,
        },
      },
    ],
  },
});
