// The runner program a stock image downloads at boot (HCLOUD_RUNNER_URL, EC2_RUNNER_URL) and the
// sha256 it must match before it runs. Checked at load, with the examples' placeholders refused:
// a wrong checksum makes servers that boot, bill and never run a job.

/** A host reserved for examples (RFC 2606): never a real download. */
const PLACEHOLDER_HOST = /(^|\.)example\.(com|net|org)$|\.(example|invalid)$/;

/** The download's settings when both are given and sound; every problem pushed names its variable. */
export function loadDownload(
  prefix: "HCLOUD" | "EC2",
  runnerUrl: string | undefined,
  sha: string | undefined,
  problems: string[],
): { url: string; sha256: string } | undefined {
  const urlVar = `${prefix}_RUNNER_URL`;
  const shaVar = `${prefix}_RUNNER_SHA256`;
  const sha256 = sha?.toLowerCase();
  const what = prefix === "HCLOUD" ? "a stock image" : "a stock AMI";
  if (runnerUrl && !/^https:\/\//.test(runnerUrl)) problems.push(`${urlVar} must be an https URL (the runner program ${what} downloads)`);
  else if (runnerUrl && PLACEHOLDER_HOST.test(hostOf(runnerUrl)))
    problems.push(`${urlVar} points at ${hostOf(runnerUrl)}, a placeholder: set the runner program's real download URL (a release asset of gitea/runner, say)`);
  if (Boolean(runnerUrl) !== Boolean(sha256)) problems.push(`${urlVar} and ${shaVar} go together: the download is run only once its sha256 matches`);
  if (sha256 && !/^[0-9a-f]{64}$/.test(sha256)) problems.push(`${shaVar} must be 64 hex digits (sha256sum of the runner program)`);
  else if (sha256 && /^(.)\1{63}$/.test(sha256))
    problems.push(`${shaVar} is a placeholder (one digit 64 times): set the sha256sum of the file at ${urlVar}, or every server boots and never runs a job`);
  return runnerUrl && sha256 && !problems.some((p) => p.startsWith(urlVar) || p.startsWith(shaVar)) ? { url: runnerUrl, sha256 } : undefined;
}

function hostOf(url: string): string {
  try {
    return new URL(url).hostname.toLowerCase();
  } catch {
    return "";
  }
}
