// How a workload runs forgejo-runner bound to its job (FORGE=forgejo), as the drivers are told (RunnerLaunch): `one-job --handle <h>
// --wait` takes exactly that job attempt, and with `--token-url file:…` the runner's token is read
// from the Secret, never from the spec. Arguments reach the shell as "$@", never spliced into it.
import type { ForgejoRunnerIdentity } from "../../domain/runner-identity.ts";
import type { LaunchInput, RunnerLaunch } from "../../domain/backend.ts";
import { base64 } from "../../model/crypto.ts";

/** Where the Pod mounts the Secret (`token`, `claim-token`). */
export const FORGEJO_SECRET_DIR = "/etc/forgejo-runner";
/** Where cloud-init writes them in a VM. */
export const FORGEJO_VM_DIR = "/var/lib/forgejo-runner";

/** forgejo-runner's arguments: the connection, one `--label` per label, the handle, and wait for the task. */
export function oneJobArgs(runner: ForgejoRunnerIdentity, dir: string, config = false): string[] {
  return [
    "one-job",
    // A root flag of forgejo-runner's, taken after its command too (cobra's persistent flags).
    ...(config ? ["--config", `${dir}/config.yml`] : []),
    "--url",
    runner.url,
    "--uuid",
    runner.uuid,
    "--token-url",
    `file:${dir}/token`,
    ...runner.labels.flatMap((l) => ["--label", l]),
    ...(runner.handle ? ["--handle", runner.handle] : []),
    "--wait",
  ];
}

/**
 * Runs the job, then reports completion with the claim token (best effort), and exits with the
 * runner's status. A warm runner (GDR_HANDLE_URL set) first asks the dispatcher for its job's
 * handle, every 2 s, until it is given one.
 */
export function oneJobScript(dir: string): string {
  return [
    "set -u",
    'if [ -n "${GDR_HANDLE_URL:-}" ]; then',
    '  h=""',
    `  while [ -z "$h" ]; do h=$(wget -q -O - --header "Authorization: Bearer $(cat ${dir}/claim-token)" "$GDR_HANDLE_URL") || h=""; [ -n "$h" ] || sleep 2; done`,
    '  set -- "$@" --handle "$h"',
    "fi",
    'forgejo-runner "$@"; rc=$?',
    `wget -q -O /dev/null --header "Authorization: Bearer $(cat ${dir}/claim-token)" --post-data "" "$GDR_COMPLETE_URL" || true`,
    "exit $rc",
  ].join("\n");
}

/** How the kubernetes and kubevirt drivers start a Forgejo runner: its token and the claim token in the Secret, `one-job` bound to its job. */
/**
 * The runner's config file when the Worker serves the cache: its proxy forwards the jobs' requests
 * to cache.external_server, signed with cache.secret (forgejo-runner internal/app/run/runner.go);
 * both this job's own. JSON, which is YAML too.
 */
export const forgejoCacheConfig = (input: LaunchInput) =>
  input.cache ? JSON.stringify({ cache: { enabled: true, external_server: input.cache.url, secret: input.cache.secret } }) : undefined;

export function forgejoLaunch(runner: ForgejoRunnerIdentity, input: LaunchInput): RunnerLaunch {
  const config = forgejoCacheConfig(input);
  return {
    files: { token: runner.token, "claim-token": input.claimToken, ...(config ? { "config.yml": config } : {}) },
    mountPath: FORGEJO_SECRET_DIR,
    command: ["/bin/sh", "-c", oneJobScript(FORGEJO_SECRET_DIR), "forgejo-runner", ...oneJobArgs(runner, FORGEJO_SECRET_DIR, config !== undefined)],
    userData: forgejoCloudInit(runner, input),
  };
}

/** Single-quoted for sh: nothing inside is expanded. */
export const shellQuote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

/** cloud-init user data for a VM: token and claim token to files (0600), the script, one job, then power off. */
function forgejoCloudInit(runner: ForgejoRunnerIdentity, request: LaunchInput): string {
  const dir = FORGEJO_VM_DIR;
  const config = forgejoCacheConfig(request);
  const script = [
    `export GDR_COMPLETE_URL=${shellQuote(request.completeUrl)}`,
    ...(request.handleUrl ? [`export GDR_HANDLE_URL=${shellQuote(request.handleUrl)}`] : []),
    `set -- ${oneJobArgs(runner, dir, config !== undefined)
      .map(shellQuote)
      .join(" ")}`,
    oneJobScript(dir),
    "",
  ].join("\n");
  const file = (path: string, content: string, permissions: string) => [
    `  - path: ${path}`,
    `    permissions: '${permissions}'`,
    "    encoding: b64",
    `    content: ${base64(content)}`,
  ];
  // The script as a literal block, for a person to read: no argument holds a line break (labels hold no space).
  const script_ = [
    `  - path: ${dir}/run.sh`,
    "    permissions: '0700'",
    "    content: |",
    ...script
      .trimEnd()
      .split("\n")
      .map((l) => `      ${l}`),
  ];
  return [
    "#cloud-config",
    "write_files:",
    ...file(`${dir}/token`, runner.token, "0600"),
    ...file(`${dir}/claim-token`, request.claimToken, "0600"),
    ...(config ? file(`${dir}/config.yml`, config, "0600") : []),
    ...script_,
    "runcmd:",
    `  - [sh, -c, 'cd ${dir} && sh ./run.sh; poweroff']`,
    "",
  ].join("\n");
}
