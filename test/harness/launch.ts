// A runner request as the dispatcher hands it to the drivers: with its forge's launch
// (Forge.runnerFields), made from the identity the request names.
import type { RunnerRequest } from "../../src/domain/backend.ts";
import { giteaLaunch } from "../../src/forge/gitea/launch.ts";
import { forgejoLaunch } from "../../src/forge/forgejo/launch.ts";

export function launched(request: RunnerRequest): RunnerRequest {
  const input = { claimToken: request.claimToken, completeUrl: request.completeUrl, ...(request.handleUrl ? { handleUrl: request.handleUrl } : {}) };
  if (request.runner) return { ...request, launch: giteaLaunch(request.runner, input) };
  if (request.forgejo) return { ...request, launch: forgejoLaunch(request.forgejo, input) };
  return request;
}
