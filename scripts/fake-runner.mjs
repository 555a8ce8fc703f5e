// An ephemeral act_runner as the fake backend runs it: it boots for `bootMs`, then polls its
// Gitea's FetchTask every `fetchIntervalMs` (act_runner's default is 2 s) with the identity it was
// handed (the `.runner` file: address, uuid, token), runs the one task it gets for the task's
// `run_ms` or `jobMs`, reports the result with UpdateTask, tells the dispatcher it completed (as
// the pod's script does, best effort) and exits. Deleting its workload stops it wherever it is.

// With FORGE=forgejo it is `forgejo-runner one-job --handle <h> --wait` instead: it declares its
// labels, then asks FetchSingleTask for its handle's job only, every fetch interval, until it has it.
const rpc = (file, name, body) =>
  fetch(`${file.address}/api/actions/runner.v1.RunnerService/${name}`, {
    method: "POST",
    headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-runner-uuid": file.uuid, "x-runner-token": file.token },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(5_000),
  });

/** Starts the runner of `request` (a PUT body); `on(event)` hears booted, task, done, stopped. Returns stop(). */
export function startRunner(request, { bootMs = 0, fetchIntervalMs = 2_000, jobMs = 1_000 }, on = () => undefined) {
  const forgejo = request.forgejo;
  const file = forgejo ? { address: forgejo.url, uuid: forgejo.uuid, token: forgejo.token } : request.runner;
  const fetchTask = (version) =>
    forgejo
      ? rpc(file, "FetchSingleTask", { tasksVersion: version, ...(forgejo.handle ? { handle: forgejo.handle } : {}) })
      : rpc(file, "FetchTask", { tasksVersion: version });
  let stopped = false;
  let timer;
  const wait = (ms) => new Promise((r) => (timer = setTimeout(r, ms)));
  (async () => {
    await wait(bootMs);
    if (stopped) return;
    on({ event: "booted" });
    // A warm runner asks the dispatcher for its job's handle until it is given one.
    while (forgejo && !forgejo.handle && request.handleUrl && !stopped) {
      const res = await fetch(request.handleUrl, { headers: { authorization: `Bearer ${request.claimToken}` }, signal: AbortSignal.timeout(5_000) }).catch(
        () => undefined,
      );
      if (res?.status === 200) forgejo.handle = await res.text();
      else {
        await res?.body?.cancel();
        await wait(fetchIntervalMs);
      }
    }
    if (stopped) return;
    if (forgejo)
      await rpc(file, "Declare", { version: "12.8.0", labels: forgejo.labels })
        .then((r) => r.body?.cancel())
        .catch(() => undefined);
    let version = "0";
    while (!stopped) {
      const res = await fetchTask(version).catch(() => undefined);
      // Deleted in Gitea (401): an ephemeral runner's identity is gone, so is its reason to live.
      if (res?.status === 401) break;
      const body = res?.ok ? await res.json().catch(() => ({})) : {};
      version = body.tasksVersion ?? version;
      if (!body.task) {
        await wait(fetchIntervalMs);
        continue;
      }
      on({ event: "task", task: body.task.id });
      // Its job's cache step (Gitea's capability URL only): restore its dependencies, else save them after the work.
      const restored = request.cache && !forgejo ? await restoreDemo(request.cache.url) : undefined;
      if (restored) on({ event: "cache", result: restored });
      await wait(Number(body.task.context?.run_ms ?? jobMs));
      if (restored === "miss") on({ event: "cache", result: await saveDemo(request.cache.url) });
      if (stopped) return;
      const now = new Date().toISOString();
      await rpc(file, "UpdateTask", { state: { id: body.task.id, result: "RESULT_SUCCESS", startedAt: now, stoppedAt: now } }).catch(() => undefined);
      await fetch(request.completeUrl, { method: "POST", headers: { authorization: `Bearer ${request.claimToken}` }, signal: AbortSignal.timeout(5_000) })
        .then((r) => r.body?.cancel())
        .catch(() => undefined);
      break;
    }
    if (!stopped) on({ event: "done" });
  })();
  return () => {
    stopped = true;
    clearTimeout(timer);
    on({ event: "stopped" });
  };
}

// The demo job's cache step, as actions/cache calls the v1 API at ACTIONS_CACHE_URL (the runner's
// cache.external_server): one small archive under one key; a 503 (its job not claimed yet) is asked again.
const DEMO_KEY = "demo-deps-linux";
const DEMO_VERSION = "0".repeat(64);
const DEMO_ARCHIVE = new TextEncoder().encode("node_modules of the demo job\n".repeat(64));
const call = async (url, init = {}) => {
  for (let tries = 0; ; tries++) {
    const res = await fetch(url, { ...init, signal: AbortSignal.timeout(10_000) });
    if (res.status !== 503 || tries >= 4) return res;
    await res.body?.cancel();
    await new Promise((r) => setTimeout(r, 1_000));
  }
};

async function restoreDemo(base) {
  const res = await call(`${base}_apis/artifactcache/cache?keys=${DEMO_KEY}&version=${DEMO_VERSION}`).catch(() => undefined);
  if (res?.status !== 200) return res?.status === 204 ? "miss" : "refused";
  const { archiveLocation } = await res.json();
  const got = await fetch(archiveLocation, { signal: AbortSignal.timeout(10_000) }).catch(() => undefined);
  const bytes = got?.ok ? new Uint8Array(await got.arrayBuffer()) : undefined;
  return bytes?.length === DEMO_ARCHIVE.length ? "hit" : "refused";
}

async function saveDemo(base) {
  const json = { "content-type": "application/json" };
  const reserved = await call(`${base}_apis/artifactcache/caches`, {
    method: "POST",
    headers: json,
    body: JSON.stringify({ key: DEMO_KEY, version: DEMO_VERSION, cacheSize: DEMO_ARCHIVE.length }),
  }).catch(() => undefined);
  if (!reserved?.ok) return reserved?.status === 409 ? "taken" : "refused";
  const { cacheId } = await reserved.json();
  const range = `bytes 0-${DEMO_ARCHIVE.length - 1}/*`;
  const put = await call(`${base}_apis/artifactcache/caches/${cacheId}`, { method: "PATCH", headers: { "content-range": range }, body: DEMO_ARCHIVE });
  await put.body?.cancel();
  const done = await call(`${base}_apis/artifactcache/caches/${cacheId}`, {
    method: "POST",
    headers: json,
    body: JSON.stringify({ size: DEMO_ARCHIVE.length }),
  });
  await done.body?.cancel();
  return put.ok && done.ok ? "saved" : "refused";
}
