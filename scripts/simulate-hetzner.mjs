// What a server of the fake Hetzner API runs when its project simulates runners (mode.simulate):
// what the user_data of the hetzner driver makes a real server do. At boot it fetches its launch
// from the Worker, once, with the one-time token in its user_data; from the launch's files it
// takes its claim token, claims its job, works `jobMs`, and completes. Each step is noted on the
// server (`runner`), for tests and the demo's log. A server deleted meanwhile stops.

/** The bootstrap URL and token of a user_data the driver wrote, or undefined for any other. */
export function bootOf(userData) {
  const url = /^url='([^']+)'$/m.exec(userData ?? "")?.[1];
  const token = /^token='([^']+)'$/m.exec(userData ?? "")?.[1];
  return url && token ? { url, token } : undefined;
}

/** The files and environment a launch script sets, as the shell would. */
export function readLaunch(script) {
  const files = Object.fromEntries(
    [...script.matchAll(/^printf '%s' '([A-Za-z0-9+/=]*)' \| base64 -d > '([^']+)'$/gm)].map((m) => [
      m[2].split("/").pop(),
      Buffer.from(m[1], "base64").toString(),
    ]),
  );
  const env = Object.fromEntries([...script.matchAll(/^export ([A-Z_]+)='([^']*)'$/gm)].map((m) => [m[1], m[2]]));
  return { files, env };
}

/**
 * `imds` (EC2): the instance's IMDSv2, which the watcher reads every `watchMs` as the launch
 * script's watcher does: on a notice the runner stops (no claim, no completion after it) and the
 * notice is POSTed to GDR_INTERRUPT_URL with the claim token. `claimAfterMs`: the runner's wait
 * before its claim (a job not yet started when a notice comes).
 */
export async function runSimulatedServer(server, { jobMs = 3_000, log = () => undefined, alive: up, imds, watchMs = 5_000, claimAfterMs = 0 }) {
  const note = (step, status) => {
    server.runner = { ...(server.runner ?? {}), [step]: status };
    log(`[hetzner] server ${server.name}: ${step} ${status}`);
  };
  const boot = bootOf(server.userData);
  if (!boot) return note("bootstrap", "no bootstrap in user_data");
  const got = await fetch(boot.url, { method: "POST", headers: { authorization: `Bearer ${boot.token}` } }).catch(() => undefined);
  note("bootstrap", got?.status ?? "unreachable");
  if (got?.status !== 200) return got?.body?.cancel();
  const { files, env } = readLaunch(await got.text());
  const auth = { authorization: `Bearer ${files["claim-token"]}` };
  let stopped = false;
  const alive = () => up() && !stopped;
  if (imds && env.GDR_INTERRUPT_URL) void watch(imds, env.GDR_INTERRUPT_URL, auth, watchMs, up, note, () => (stopped = true));
  if (claimAfterMs) await new Promise((r) => setTimeout(r, claimAfterMs));
  if (!alive()) return;
  const claimed = await fetch(env.GDR_CLAIM_URL, { method: "POST", headers: auth }).catch(() => undefined);
  note("claim", claimed?.status ?? "unreachable");
  await claimed?.body?.cancel();
  await new Promise((r) => setTimeout(r, jobMs));
  if (!alive()) return;
  const done = await fetch(env.GDR_COMPLETE_URL, { method: "POST", headers: auth }).catch(() => undefined);
  note("complete", done?.status ?? "unreachable");
  await done?.body?.cancel();
}

async function watch(imds, interruptUrl, auth, watchMs, up, note, stop) {
  while (up()) {
    await new Promise((r) => setTimeout(r, watchMs));
    const token = await fetch(`${imds}/latest/api/token`, { method: "PUT", headers: { "x-aws-ec2-metadata-token-ttl-seconds": "300" } }).catch(() => undefined);
    if (token?.status !== 200) continue;
    const t = await token.text();
    const notice = await fetch(`${imds}/latest/meta-data/spot/instance-action`, { headers: { "x-aws-ec2-metadata-token": t } }).catch(() => undefined);
    if (notice?.status !== 200) {
      await notice?.body?.cancel();
      continue;
    }
    const body = await notice.text();
    stop();
    for (let i = 0; i < 12; i++) {
      const told = await fetch(interruptUrl, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body }).catch(() => undefined);
      note("interrupt", told?.status ?? "unreachable");
      await told?.body?.cancel();
      if (told?.ok) return;
      await new Promise((r) => setTimeout(r, watchMs));
    }
    return;
  }
}
